"""A round that cannot replay some of its scenarios goes on with the rest, and says so: the round's
result, the flow's warning, the run's record in the lake and the report's line for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.config.checks import load_config
from flows.report.render import learned_from
from flows.stages import RoundSummary, begin_pipeline_run, finish_pipeline_run
from flows.stages import replay as replay_stage
from flows.stages.replay import ReplaySections, replay_round
from judging.summary import RewardStats
from store.catalog.connection import connect
from store.pipeline_runs import PipelineRun
from store.writer import write
from tests.training.helpers import FailingSampler, calculator_script, make_trajectory
from training.replay.scenario_io import create_scenarios

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


def test_a_round_goes_on_without_the_scenarios_it_could_not_replay_and_says_so(
    tmp_path: Path, lake: Any, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    questions = ["What is 12 * 7?", "What is 3 + 4?", "What is 9 - 2?", "What is 5 * 7?"]
    rows = []
    for i, question in enumerate(questions):
        row = make_trajectory(f"t{i}")
        row["messages"][1]["content"] = question
        rows.append(row)
    write(lake, "trajectories", rows)
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    path = tmp_path / "t.toml"
    path.write_text(f'[sampler]\nmodel = "{tiny_model}"\n[replay]\ngroup_size = 2\nconcurrency = 1\n')
    settings = load_config(path).with_values("select", replay="SELECT scenario_id FROM scenarios")
    broken = FailingSampler(str(tiny_model), calculator_script, "* 7?", "the server went away")
    monkeypatch.setattr(replay_stage, "sampler_for", lambda sampler, adapter: broken)

    replayed = replay_round(
        lake,
        None,
        1,
        select=settings.select,
        pipeline=settings.pipeline,
        replaying=ReplaySections.of(settings),
    )

    assert replayed.groups == 2 and replayed.failed == 2 and "the server went away" in replayed.failure
    assert replayed.failure_text("round 1") == (
        "round 1: 2 of 4 scenarios could not be replayed "
        "(first: ConnectionError: the server went away); the next run replays them"
    )
    stats = RewardStats("r", mean=0.5, std=0.1, scored=4, equal_groups=0)
    assert RoundSummary.of(1, replayed, stats).failed_scenarios == 2

    run = begin_pipeline_run(lake, None, pipeline=settings.pipeline, publish=settings.publish)
    run = finish_pipeline_run(
        lake, run, pipeline=settings.pipeline, trained=[], decision="test", replay_failed=replayed.failed
    )
    (stored,) = connect(lake).execute("SELECT run_id, pipeline FROM runs WHERE stage = 'pipeline'").fetchall()
    recorded = PipelineRun.from_struct(*stored)
    assert recorded.learned_from["replay_failed"] == 2
    assert learned_from(recorded.learned_from).endswith("; 2 could not be replayed (sampler errors)")
