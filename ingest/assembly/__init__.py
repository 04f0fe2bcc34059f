"""Assembly: spans -> trajectories (one per agent run) and rewards, as pure functions.

- `traces`: the entry, `assemble(spans)` over a `spans` table;
- `rows`: the table as Python rows, grouped by trace;
- `runs`: which spans form which agent run;
- `normalize/`: one span -> one LLM call or tool call, per telemetry convention;
- `conversation`: the calls of a run -> one conversation;
- `trajectory`: a run -> a `trajectories` row;
- `feedback`: evaluation events and annotations -> `rewards` rows.

All but `traces` are compiled with mypyc when the package is installed (`setup.py`);
`COMPILED` says whether they are.
"""

import hashlib
import json
from importlib.machinery import EXTENSION_SUFFIXES
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


COMPILED = compiled_modules(Path(__file__).parent)

from ingest.assembly.rows import span_dicts  # noqa: E402  (after the check: it may load a compiled module)
from ingest.assembly.traces import Assembled, assemble, assemble_trace  # noqa: E402

__all__ = ["COMPILED", "Assembled", "assemble", "assemble_trace", "span_dicts"]
