"""A night replays only what its training reward can score: with a reward that compares with the
expected answer, a failure nobody labelled (no expected answer) is left out of every round, so a
round of failures first never comes back with groups nothing scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.config.checks import load_config
from flows.config.sections import ScoreSettings
from flows.stages import begin_pipeline_run, learning_selections, training_reward_needs_expected
from flows.stages.replay import round_scenarios
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.training.helpers import make_trajectory
from training.replay.scenario_io import create_scenarios

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

# t0-t3 rated wrong (t0 and t1 with no right answer), t4-t9 rated right
VERDICTS = [
    {"trajectory_id": "t0", "verdict": 0},
    {"trajectory_id": "t1", "verdict": 0},
    {"trajectory_id": "t2", "verdict": 0, "expected": "84"},
    {"trajectory_id": "t3", "verdict": 0, "expected": "85"},
    *({"trajectory_id": f"t{i}", "verdict": 1} for i in range(4, 10)),
]


def test_rounds_replay_only_scenarios_the_training_reward_can_score(tmp_path: Path, lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(10)])
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(v) + "\n" for v in VERDICTS))
    imported = CliRunner().invoke(app, ["labels", "import", str(labels), "--lake", lake.root])
    assert imported.exit_code == 0, imported.output
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    path = tmp_path / "t.toml"
    path.write_text(
        '[pipeline]\nscenarios_per_round = 2\n[select]\nreplay = "SELECT scenario_id FROM scenarios"\n'
    )
    settings = load_config(path)
    run = begin_pipeline_run(lake, None, pipeline=settings.pipeline, publish=settings.publish)
    con = connect(lake)

    def sources(sql: str) -> set[str]:
        query = f"SELECT source_trajectory_id FROM scenarios WHERE scenario_id IN ({sql})"
        return {r[0] for r in con.execute(query).fetchall()}

    every = learning_selections(run, settings.select)
    assert sources(every.replay) == {f"t{i}" for i in range(10)}
    scorable = learning_selections(run, settings.select, expected_only=True)
    assert sources(scorable.replay) == {f"t{i}" for i in range(2, 10)}

    # failures first: round 1 is the two that have a right answer, not the two that have none
    first = round_scenarios(lake, 1, 0, select=scorable, pipeline=settings.pipeline)
    assert sources(first) == {"t2", "t3"}
    assert sources(round_scenarios(lake, 1, 0, select=every, pipeline=settings.pipeline)) <= {
        "t0",
        "t1",
        "t2",
        "t3",
    }


def test_which_training_rewards_need_an_expected_answer() -> None:
    demo = ["flows.demo.task:calculator_reward", "exact_match", "tool_success", "ruler"]
    assert training_reward_needs_expected(ScoreSettings(rewards=demo, reward="calculator"))
    assert training_reward_needs_expected(ScoreSettings(rewards=demo, reward="exact_match"))
    assert not training_reward_needs_expected(ScoreSettings(rewards=demo, reward="tool_success"))
    assert not training_reward_needs_expected(ScoreSettings(rewards=demo, reward="ruler"))
    weighted = ScoreSettings(rewards=demo, reward="combined", weights={"exact_match": 1.0, "ruler": 1.0})
    assert not training_reward_needs_expected(weighted)
