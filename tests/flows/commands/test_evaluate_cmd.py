"""`trajlake evaluate`: policies compared on the val scenarios with paired intervals, nothing published.

On the demo's pieces at their small size: the calculator agent's production traffic, the tiny
pretrained model, an SFT adapter published as production.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.demo.base_model import pretrain_base_model
from flows.demo.capture import capture_production_traces
from flows.demo.config import write_demo_config
from flows.demo.run import SIZES
from flows.demo.serving import TEMPERATURE
from store.catalog.connection import connect
from store.pipeline_runs import pipeline_runs
from tests.flows.stages.by_hand import sft_by_hand
from training.publish import PublishConfig, publish
from training.registry import adapter_rows
from training.tiny import build_tiny_model

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

NAME = "calculator-agent"
SPEC = SIZES["small"]


@pytest.fixture
def published_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The demo's lake with its production traffic and scenarios, an SFT adapter holding `production`,
    and its trajlake.toml in effect; returns the lake and the adapter's run folder."""
    model = pretrain_base_model(build_tiny_model(tmp_path / "tiny"), tmp_path / "model")
    lake = tmp_path / "lake"
    config = write_demo_config(tmp_path / "trajlake.toml", lake, model, SPEC, None)
    monkeypatch.setenv("TRAJLAKE_CONFIG", str(config))
    capture_production_traces(lake, SPEC.questions)
    adapter = sft_by_hand(lake, config)
    publish(lake, adapter, PublishConfig(name=NAME), aliases=("latest", "production"))
    return lake, adapter


def test_evaluate_compares_policies_paired_and_publishes_nothing(published_lake: tuple[Path, str]) -> None:
    lake, adapter = published_lake
    before = adapter_rows(lake, NAME)
    runner = CliRunner()
    # default: the base model and the adapter holding production; a graded reward (0.2 a call, 0.5 the
    # right call, 1 the right answer), so the tiny model's policies score apart from 0
    graded = ["--reward", "flows.demo.task:calculator_reward"]
    out = runner.invoke(app, ["evaluate", "--lake", str(lake), *graded, "--json"])
    assert out.exit_code == 0, out.output
    evaluation = json.loads(out.stdout)
    table = evaluation["table"]
    val = [row for row in table if row["kind"] == "val"]
    scenarios = connect(lake).execute("SELECT count(*) FROM scenarios WHERE split = 'val'").fetchone()[0]
    assert evaluation["comparison"]["reward"] == "calculator"
    assert [row["stage"] for row in val] == ["base", f"{NAME}:v1"]
    assert val[0]["mean"] > 0 or val[1]["mean"] > 0
    assert all(row["n"] == scenarios > 0 for row in val)
    # the adapter paired with the base model on every val scenario: the mean of per-scenario
    # differences, which over the same scenarios is the difference of the means
    (vs_base,) = [d for d in val[1]["differences"] if d["against"] == "base"]
    assert vs_base["paired_scenarios"] == scenarios
    assert vs_base["mean"] == pytest.approx(val[1]["mean"] - val[0]["mean"])
    assert vs_base["ci"][0] <= vs_base["mean"] <= vs_base["ci"][1]
    assert all(row["greedy"] for row in val)  # `[evaluate] greedy` of the demo's config
    # production on its own traffic, from its users' feedback: a reference row, not paired
    production = [row for row in table if row["kind"] == "production"]
    assert [row["policy"] for row in production] == ["production-llm-1"]
    assert production[0]["n"] == SPEC.questions and production[0]["differences"] == []
    # recorded as an eval run; nothing published, no alias moved, no pipeline run
    recorded = (
        connect(lake)
        .execute("SELECT count(*) FROM runs WHERE stage = 'eval' AND run_id = ?", [evaluation["eval_run_id"]])
        .fetchone()[0]
    )
    assert recorded == 2 + len(table)
    assert adapter_rows(lake, NAME) == before and pipeline_runs(lake) == []

    # named policies, in order, each paired with every one before it; the table for people
    named = runner.invoke(
        app,
        ["evaluate", "base", f"{NAME}:v1", adapter, "--lake", str(lake), "--no-production", "--no-greedy"],
        env={"COLUMNS": "250"},  # rich lays the table out to the terminal's width
    )
    assert named.exit_code == 0, named.output
    printed = " ".join(named.output.split())  # rich wraps long cells and lines
    assert "vs base (paired)" in printed and f"vs {NAME}:v1 (paired)" in printed
    assert "(nothing published)" in printed and "production-llm-1" not in printed

    # the sampled evaluation at a temperature of its own (production's), not the replay's
    def sampled_at(temperature: float) -> int:
        return (
            connect(lake)
            .execute(
                "SELECT count(*) FROM trajectories WHERE replay_run = 'eval' AND sampling.temperature = ?",
                [temperature],
            )
            .fetchone()[0]
        )

    assert sampled_at(0.5) == 0 and sampled_at(TEMPERATURE) > 0
    cooler = runner.invoke(
        app,
        ["evaluate", "base", "--lake", str(lake), "--temperature", "0.5", "--no-production", "--no-greedy"],
    )
    assert cooler.exit_code == 0, cooler.output
    assert sampled_at(0.5) == scenarios * SPEC.eval_group_size
    negative = runner.invoke(app, ["evaluate", "base", "--lake", str(lake), "--temperature", "-1"])
    assert negative.exit_code == 2 and negative.output.startswith(
        "error: bad configuration `evaluate.temperature` (command line): `temperature` must be >= 0"
    )
    assert len(negative.output.strip().splitlines()) == 1

    bad = runner.invoke(app, ["evaluate", "base", f"{NAME}:v9", "--lake", str(lake)])
    assert bad.exit_code == 2
    assert bad.output.startswith(
        f"error: `policy`: `{NAME}:v9` is not `base`, an adapter folder or a published"
    )
    assert len(bad.output.strip().splitlines()) == 1
    evaluated = (
        connect(lake).execute("SELECT count(DISTINCT run_id) FROM runs WHERE stage = 'eval'").fetchone()
    )
    # (`calculator`, the stored name of a `[score] rewards` spec, is a reward now: judging.resolve_reward_key)
    no_reward = runner.invoke(app, ["evaluate", "--lake", str(lake), "--reward", "no_such_reward"])
    assert no_reward.exit_code == 2 and no_reward.output.startswith(
        "error: `evaluate.reward`: reward `no_such_reward`"
    ), no_reward.output
    assert len(no_reward.output.strip().splitlines()) == 1
    # refused before any replay: no evaluation recorded
    assert (
        connect(lake).execute("SELECT count(DISTINCT run_id) FROM runs WHERE stage = 'eval'").fetchone()
        == evaluated
    )
