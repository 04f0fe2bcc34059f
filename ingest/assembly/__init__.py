"""Assembly: spans -> trajectories (one per agent run) and rewards, as pure functions.

- `traces`: the entry, `assemble(spans)` over a `spans` table;
- `rows`: the table as Python rows, grouped by trace;
- `runs`: which spans form which agent run;
- `normalize/`: one span -> one LLM call or tool call, per telemetry convention;
- `conversation`: the calls of a run -> one conversation;
- `trajectory`: a run -> a `trajectories` row;
- `feedback`: evaluation events and annotations -> `rewards` rows.

All but `traces` are compiled with mypyc when the package is installed (`setup.py`);
`COMPILED` says whether they run, `BUILD` says so in words. A compiled module older than
its source never runs: the whole package falls back to its source with one warning, and
`TRAJLAKE_PURE_PYTHON=1` at run time chooses the source too.
"""

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path


def compiled_modules(here: Path) -> bool:
    """Whether the package at `here` has compiled modules (they load before their source); an
    ImportError when one of them was compiled from another version of its source."""
    binaries = [p for p in here.rglob("*") if any(p.name.endswith(s) for s in EXTENSION_SUFFIXES)]
    if not binaries:
        return False
    manifest = here / "_compiled.json"
    compiled = json.loads(manifest.read_text()) if manifest.exists() else {}
    for binary in binaries:
        source = binary.with_name(binary.name.split(".", 1)[0] + ".py")
        name = str(source.relative_to(here))
        if name not in compiled or hashlib.sha256(source.read_bytes()).hexdigest() != compiled[name]:
            raise ImportError(
                f"{binary} was compiled from another version of {name}: rebuild with `pip install -e .` "
                "(or `TRAJLAKE_PURE_PYTHON=1 pip install -e .` to run the Python source)"
            )
    return True


class SourceFirst(importlib.abc.MetaPathFinder):
    """Loads a package's modules from their `.py` source even where a compiled module lies beside it.

    All or nothing: mypyc's modules call each other natively, so a compiled module must never
    meet the source of another one.
    """

    def __init__(self, package: str, root: Path) -> None:
        self.package = package
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if not fullname.startswith(self.package + "."):
            return None
        relative = Path(*fullname[len(self.package) + 1 :].split("."))
        package_init = self.root / relative / "__init__.py"
        if package_init.exists():
            return importlib.util.spec_from_file_location(
                fullname, package_init, submodule_search_locations=[str(package_init.parent)]
            )
        module = self.root / relative.with_suffix(".py")
        return importlib.util.spec_from_file_location(fullname, module) if module.exists() else None


def _choose_build(here: Path) -> tuple[bool, str]:
    """(whether the compiled modules run, which build runs, in words); installs `SourceFirst` when
    compiled modules lie there but must not run: an edited source (with one warning) or
    `TRAJLAKE_PURE_PYTHON=1` in the environment."""
    try:
        compiled = compiled_modules(here)
    except ImportError as exc:
        warnings.warn(
            f"{exc}; running the assembler from its Python source meanwhile (slower)",
            RuntimeWarning,
            stacklevel=2,
        )
        sys.meta_path.insert(0, SourceFirst(__name__, here))
        return (
            False,
            "Python source (a compiled module is older than its source: rebuild with `pip install -e .`)",
        )
    if compiled and os.environ.get("TRAJLAKE_PURE_PYTHON"):
        sys.meta_path.insert(0, SourceFirst(__name__, here))
        return False, "Python source (TRAJLAKE_PURE_PYTHON is set)"
    return compiled, "compiled (mypyc)" if compiled else "Python source (no compiled modules installed)"


COMPILED, BUILD = _choose_build(Path(__file__).parent)

from ingest.assembly.rows import span_dicts  # noqa: E402  (after the check: it may load a compiled module)
from ingest.assembly.traces import Assembled, assemble, assemble_trace  # noqa: E402

__all__ = ["BUILD", "COMPILED", "Assembled", "assemble", "assemble_trace", "span_dicts"]
