"""The shop example end to end, at a small size, through its own script (`examples/shop/run.sh`).

The script is what a user runs: only documented commands (`trajlake collect`, `sql`,
`pipeline`, `serve-sampler`, `report`) and the example's own code (the agent on the openai SDK
with `ingest.instrument()` and `ingest.feedback`, its scripted production LLM, its reward).
At this size SmolLM2 learns nothing (2 SFT steps, one GRPO round of 4 x 2) and the gate
refuses it, so the test publishes the candidate as `latest` (`pipeline.latest_if_refused`)
and serves that; what is checked is the loop's real output: traces and feedback in the lake,
scenarios whose expected answers come only from conversations rated right or labelled (and
are the right ones), an adapter published, and the traffic it served attributed to it.
Marked `realmodel` and `slow` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from judging.trajectory import expected_answer
from store.catalog.connection import connect
from store.lake import Lake
from training.models.known import MODELS_ENV, fetch_model

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shop"
RUNS = 16  # with seed 0 the production LLM errs on run 13 (and that customer gives the answer)
SMALL = {  # the pipeline's sizes at a few minutes, through the environment as a user would
    "TRAJLAKE_PIPELINE__ROUNDS": "1",
    "TRAJLAKE_PIPELINE__SCENARIOS_PER_ROUND": "4",
    "TRAJLAKE_PIPELINE__LATEST_IF_REFUSED": "true",
    "TRAJLAKE_TRAIN__SFT__MAX_STEPS": "2",
    "TRAJLAKE_REPLAY__GROUP_SIZE": "2",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_shop_example_runs_the_loop(tmp_path: Path) -> None:
    fetch_model("smollm2-135m-instruct", tmp_path / "models")
    env = {
        **os.environ,
        **SMALL,
        MODELS_ENV: str(tmp_path / "models"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "SHOP_RUNS": str(RUNS),
        "SHOP_SERVE": "shop-agent:latest",
        "SHOP_COLLECTOR_PORT": str(free_port()),
        "SHOP_LLM_PORT": str(free_port()),
        "SHOP_ADAPTER_PORT": str(free_port()),
    }
    work = tmp_path / "run"
    done = subprocess.run(
        [str(EXAMPLE / "run.sh"), str(work)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    sys.path.insert(0, str(EXAMPLE))
    try:
        from shop.catalog import parse_question
    finally:
        sys.path.remove(str(EXAMPLE))

    con = connect(Lake(str(work / "lake")))
    rows = con.execute(
        "SELECT model, count(*) FROM trajectories WHERE agent_name = 'shop' AND source = 'otel' GROUP BY ALL"
    ).fetchall()
    # production before (seed 0) and after (seed 1) the adapter, and the adapter's own runs
    assert dict(rows) == {"shop-llm-prod": 2 * RUNS, "shop-agent-v1": RUNS}
    production = [json.loads(line) for line in (work / "production.jsonl").read_text().splitlines()]
    wrong = sum(not run["correct"] for run in production)
    feedback = dict(
        con.execute(
            "SELECT value, count(*) FROM latest_rewards r JOIN trajectories t USING (trajectory_id) "
            "WHERE r.name = 'user_feedback' AND t.model = 'shop-llm-prod' AND t.started_at < "
            "(SELECT min(started_at) FROM trajectories WHERE model = 'shop-agent-v1') GROUP BY ALL"
        ).fetchall()
    )
    assert feedback == {1.0: RUNS - wrong, 0.0: wrong} and wrong > 0  # the production LLM errs

    # every scenario's expected answer is the right one: from a conversation rated right or a label
    scenarios = con.execute(
        "SELECT s.rated, s.expected_source, s.expected, m.content FROM scenarios s "
        "JOIN messages m ON m.trajectory_id = s.source_trajectory_id AND m.role = 'user'"
    ).fetchall()
    assert scenarios and {(r, src) for r, src, _, _ in scenarios} <= {
        ("right", "rated_right"),
        ("wrong", "label"),
    }
    assert any(r == "wrong" for r, _, _, _ in scenarios)  # a thumbs-down with the answer became a scenario
    for _, _, expected, question in scenarios:
        parsed = parse_question(question)
        assert parsed is not None and expected_answer({"expected": expected}) == parsed.answer, (
            question,
            expected,
        )

    published = con.execute("SELECT name, version, base_model FROM adapters").fetchall()
    assert published == [("shop-agent", 1, "smollm2-135m-instruct")]
    served = con.execute(
        "SELECT sum(trajectories) FROM policy_performance WHERE adapter = 'shop-agent' AND adapter_version = 1 "
        "AND name = 'user_feedback'"
    ).fetchone()
    assert served == (RUNS,)  # the served traffic and its feedback, attributed to the version
    comparison = (work / "comparison.md").read_text()
    assert f"| published adapter | {RUNS} |" in comparison and "paired 95% CI" in comparison
    assert (work / "report.html").stat().st_size > 10_000
