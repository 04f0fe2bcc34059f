"""The compiled assembler (`setup.py`) never runs code other than its source says."""

from __future__ import annotations

import hashlib
import json
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import ingest.assembly
from ingest.assembly import compiled_modules


def _package(root: Path, source: str, compiled_from: str | None) -> Path:
    """A package with `runs.py` holding `source`, and its compiled module built from `compiled_from`."""
    (root / "runs.py").write_text(source)
    if compiled_from is not None:
        (root / f"runs{EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF")
        digest = hashlib.sha256(compiled_from.encode()).hexdigest()
        (root / "_compiled.json").write_text(json.dumps({"runs.py": digest}))
    return root


def test_a_package_without_compiled_modules_runs_its_source(tmp_path: Path) -> None:
    assert compiled_modules(_package(tmp_path, "x = 1\n", None)) is False


def test_a_compiled_module_built_from_its_source_is_used(tmp_path: Path) -> None:
    assert compiled_modules(_package(tmp_path, "x = 1\n", "x = 1\n")) is True


@pytest.mark.parametrize("manifest", ["other source", "no manifest"])
def test_a_compiled_module_built_from_other_source_refuses_to_load(tmp_path: Path, manifest: str) -> None:
    root = _package(tmp_path, "x = 2\n", "x = 1\n")
    if manifest == "no manifest":
        (root / "_compiled.json").unlink()
    with pytest.raises(ImportError, match=r"runs\.cpython.* was compiled from another version of runs\.py"):
        compiled_modules(root)


def test_compiled_says_which_modules_run() -> None:
    # Importing the package ran the check on the real modules: it loaded, so every compiled
    # module (if any) was built from the source beside it, and it is what runs.
    from ingest.assembly import conversation, traces

    assert conversation.__file__.endswith(tuple(EXTENSION_SUFFIXES)) is ingest.assembly.COMPILED
    assert traces.__file__.endswith(".py")  # the batch entry stays Python (setup.py)
