"""Prefect runs log at INFO to the API (the UI's run logs), and nothing but what trajlake and Prefect say.

Run in a fresh process (`prefect_logs_run.py`) with its own `PREFECT_HOME`, set up as
`trajlake pipeline` and `trajlake serve` set Prefect up: Prefect reads its logging settings
once, on import, so the test process's own Prefect could not show them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.demo.base_model import pretrain_base_model
from training.tiny import build_tiny_model

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

#: a line of `dis` output, as dill's disassembly of a hashed function printed into the run's log
BYTECODE = re.compile(r"\b(LOAD|STORE|CALL|RETURN|BUILD|PUSH|POP)_[A-Z_]+\b")


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs-model")
    return pretrain_base_model(build_tiny_model(root / "tiny"), root / "model")


def test_a_pipeline_run_logs_its_steps_at_info_and_no_bytecode(tmp_path: Path, demo_model: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PYTHONPATH": str(Path.cwd())}
    script = Path(__file__).with_name("prefect_logs_run.py")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(demo_model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    logs = out["logs"]
    assert out["steps"] > 0  # it trained: the trainers' dataset hashing ran inside the tasks
    info = [log for log in logs if log["level"] == 20]
    messages = [log["message"] for log in info]
    # the flow run's own record of its steps, each as it ended, and its decision
    flow = [log["message"] for log in info if log["name"] == "prefect.flow_runs"]
    assert any(m.startswith("pipeline run pipeline-") and "starts from the base model" in m for m in flow)
    for step in ("assemble", "scenarios", "sft", "round 1: replay", "round 1: score", "round 1: grpo"):
        assert any(m.startswith(f"{step}: done in ") for m in flow), step
    assert any(" promoted: " in m or " not promoted: " in m for m in flow)
    # the trainers' loss, in the training tasks' own logs
    tasks = [log for log in info if log["name"] != "prefect.flow_runs"]
    assert any(re.search(r"\bsft step \d+/\d+: loss \d", log["message"]) for log in tasks), messages
    assert any(re.search(r"\bgrpo step \d+/\d+: loss -?\d", log["message"]) for log in tasks), messages
    # and nothing a library printed: no disassembly of a hashed function
    assert not [m for m in (log["message"] for log in logs) if BYTECODE.search(m)]
