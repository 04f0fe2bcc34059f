"""Importing trajlake's libraries changes nothing in the importing process (issue 57): an agent that
calls `ingest.instrument()` keeps its pyarrow pools, its import machinery and its environment.

Run in a fresh interpreter, since this test process has imported everything long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {"store", "ingest", "judging", "training", "flows"}
# The variables trajlake's code sets (each in a function a command or `instrument()` calls).
OUR_VARIABLES = ("TRAJLAKE_", "OTEL_", "PREFECT_", "MALLOC_", "ARROW_")

# The user's own settings first (sizes no library would choose), then every module of `store`
# and `ingest` imported.
PROBE = """
import json, os, sys
import pyarrow as pa
pa.set_io_thread_count(3)
pa.set_cpu_count(2)
def state():
    return {"io": pa.io_thread_count(), "cpu": pa.cpu_count(), "pool": pa.default_memory_pool().backend_name,
            "meta_path": [type(f).__module__ + "." + type(f).__name__ for f in sys.meta_path],
            "environ": dict(os.environ)}
before = state()
import importlib, pkgutil, store, ingest
for package in (store, ingest):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
after = state()
print(json.dumps([before, after]))
"""


def test_importing_store_and_ingest_changes_no_global_state() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRAJLAKE_PURE_PYTHON", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after["io"] == before["io"] == 3  # the user's IO pool, not resized to store's taste
    assert after["cpu"] == before["cpu"] == 2
    assert after["pool"] == before["pool"]  # the collector picks its allocator when it starts, not here
    # no import hook of ours (another library's is its own business)
    assert [f for f in after["meta_path"] if f not in before["meta_path"] and f.split(".")[0] in OURS] == []
    changed = {
        k
        for k in before["environ"].keys() | after["environ"].keys()
        if before["environ"].get(k) != after["environ"].get(k)
    }
    assert {k for k in changed if k.startswith(OUR_VARIABLES)} == set()
