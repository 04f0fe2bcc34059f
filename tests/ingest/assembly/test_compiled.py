"""The compiled assembler (`setup.py`) never runs code other than its source says."""

from __future__ import annotations

import hashlib
import json
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import ingest.assembly
from ingest.assembly import compiled_modules, conversation, traces


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
    assert conversation.__file__.endswith(tuple(EXTENSION_SUFFIXES)) is ingest.assembly.COMPILED
    assert traces.__file__.endswith(".py")  # the batch entry stays Python (setup.py)


def test_an_edited_source_runs_from_source_with_one_warning(tmp_path: Path) -> None:
    """A compiled module older than its source: `import ingest` still works, on the source, and says so."""
    import shutil
    import subprocess
    import sys

    if not ingest.assembly.COMPILED:
        pytest.skip("this install has no compiled modules (TRAJLAKE_PURE_PYTHON build or no C compiler)")
    root = Path(ingest.__file__).parents[1]
    copy = tmp_path / "tree"
    shutil.copytree(root / "ingest", copy / "ingest")
    shutil.copytree(root / "store", copy / "store")
    for shared in root.glob("*__mypyc*"):
        shutil.copy(shared, copy / shared.name)
    edited = copy / "ingest" / "assembly" / "conversation.py"
    edited.write_text(edited.read_text() + "\n# an edit after the build\n")
    probe = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import ingest.assembly as a\n"
        "from ingest.assembly import conversation\n"
        "from ingest.assembly.normalize import genai\n"
        "print(a.COMPILED, conversation.__file__.endswith('.py'), genai.__file__.endswith('.py'))\n"
        "print(sum('older than its source' in str(w.message) or 'another version' in str(w.message) for w in caught))\n"
        "print(a.BUILD)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=copy, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0] == "False True True"  # every module from source, none compiled beside them
    assert out[1] == "1"
    assert out[2].startswith("Python source")
