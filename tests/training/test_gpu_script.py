"""The GPU machine's script runs here, on a tiny shape, without the lake's libraries.

A lent GPU machine has torch, transformers, PEFT and accelerate (TRL and datasets travel as
wheels) and none of deltalake, DuckDB, Polars, Prefect, Langfuse or OpenTelemetry. The
trainers, tree packing and the transformers sampler must import and run there: this test
runs `bench/gpu.py --tiny` in an interpreter whose site-packages lack exactly those
libraries, so the script cannot rot and no lake import can creep into the maths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ROOT = Path(__file__).resolve().parents[2]
LAKE_LIBRARIES = ("deltalake", "duckdb", "polars", "prefect", "langfuse", "opentelemetry")


def site_without_lake(folder: Path) -> Path:
    """A site-packages of links to the real one's entries, the lake's libraries left out."""
    real = Path(sysconfig.get_paths()["purelib"])
    folder.mkdir()
    for entry in real.iterdir():
        name = entry.name.lower().replace("-", "_")
        if name.startswith(LAKE_LIBRARIES) or name.endswith(".pth") or name.startswith("__editable__"):
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def test_the_gpu_script_runs_without_the_lake_libraries(tmp_path: Path) -> None:
    # named `site-packages`: under `-S` a virtualenv's python keeps the base interpreter's prefix
    # (site.py is what switches it), so dill, which pickles modules below a prefix or in a
    # `site-packages` folder by reference, would otherwise try to pickle pyarrow by value
    site = site_without_lake(tmp_path / "site-packages")
    out = tmp_path / "out"
    program = f"""
import importlib.util, json, runpy, sys
sys.path[:0] = [{str(ROOT)!r}, {str(site)!r}]
assert all(importlib.util.find_spec(m) is None for m in {LAKE_LIBRARIES!r}), "a lake library is visible"
sys.argv = ["bench/gpu.py", "--tiny", "--out", {str(out)!r}]
runpy.run_path({str(ROOT / "bench" / "gpu.py")!r}, run_name="__main__")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("store", "ingest", "judging", "flows"))
loaded += sorted(m for m in sys.modules if m.split(".")[0] in {LAKE_LIBRARIES!r})
print("LOADED " + json.dumps(loaded))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-S", "-c", program],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # no lake stage or lake library loaded: of `store`, only the declarations the trainers use
    # (errors, the metrics' names, the sampling record and its temperature rule)
    loaded = json.loads(result.stdout.split("LOADED ")[-1])
    declarations = {"store", "store.errors", "store.metrics", "store.sampling"}
    assert "store" in loaded and set(loaded) <= declarations, loaded
    table = (out / "gpu_table.md").read_text()
    for section in ("### GRPO", "### SFT", "### Sampler"):
        assert section in table
    assert "failed" not in table
    grpo = json.loads((out / "gpu_results.json").read_text())["grpo"]
    assert [r["implementation"] for r in grpo] == ["stock TRL", "trajlake, unpacked", "trajlake, tree-packed"]
    assert grpo[2]["saved_share"] > 0.2 and grpo[0]["saved_share"] == 0
    assert all(r["step_tokens"] > 0 and r["pass_tokens"] > 0 for r in grpo)
