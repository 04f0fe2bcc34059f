"""Compiles the assembler's per-trace work (`ingest/assembly`) to C with mypyc: the same Python
source, typed as it is, run without the interpreter loop (1.3x the speed of the source).

`traces.py` (the batch entry: Arrow in and out, and the per-trace isolation that catches a
failure of the compiled parts) and the package `__init__` stay Python. Each build records
the hash of every source it compiled (`_compiled.json`), so that a compiled module older
than its source refuses to load (`ingest/assembly/__init__.py`). `TRAJLAKE_PURE_PYTHON=1
pip install -e .` removes the compiled modules and runs the source; a machine without a C
compiler gets the same (the extensions are optional).

The dependencies are built here too: pyproject.toml's `[tool.trajlake] core-dependencies`
plus its `train` and `flows` extras, or the core alone under `TRAJLAKE_CORE_INSTALL=1` (the
collector's, the Langfuse import's, `sql`'s, `forget`'s and the report's install, without
torch, TRL or Prefect: `.ci/core-env`). Python packaging has no default extras, and the
README's `pip install -e .` must go on installing what the demo runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path

from setuptools import setup

ASSEMBLY = Path("ingest/assembly")
MANIFEST = ASSEMBLY / "_compiled.json"
PYTHON_ONLY = {ASSEMBLY / "__init__.py", ASSEMBLY / "traces.py"}


def compiled_assembler() -> list:
    for binary in [*ASSEMBLY.rglob("*.so"), *ASSEMBLY.rglob("*.pyd"), *Path().glob("*__mypyc.*")]:
        binary.unlink()  # never left behind by a build that does not remake it
    MANIFEST.unlink(missing_ok=True)
    if os.environ.get("TRAJLAKE_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    sources = sorted(p for p in ASSEMBLY.rglob("*.py") if p not in PYTHON_ONLY)
    # Imports from outside the assembler are `Any` (`skip`): only its own annotations are compiled in.
    extensions = mypycify(
        ["--follow-imports=skip", "--ignore-missing-imports", *map(str, sources)], opt_level="3"
    )
    for extension in extensions:
        extension.optional = True
    hashes = {str(p.relative_to(ASSEMBLY)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sources}
    MANIFEST.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    return extensions


def dependencies() -> list[str]:
    pyproject = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    core: list[str] = pyproject["tool"]["trajlake"]["core-dependencies"]
    if os.environ.get("TRAJLAKE_CORE_INSTALL"):
        return core
    extras = pyproject["project"]["optional-dependencies"]
    return [*core, *extras["train"], *extras["flows"]]


setup(ext_modules=compiled_assembler(), install_requires=dependencies())
