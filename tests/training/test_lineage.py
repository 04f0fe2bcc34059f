"""Lineage is a table version: the exact training set reads again after the lake moved on."""

from __future__ import annotations

import json
from pathlib import Path

from flows.cli import app
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.writer import write
from tests.training.test_datasets import write_groups
from tests.training.train_helpers import reward, stored_groups
from training.datasets import select_grpo
from training.lineage import as_of_versions
from training.registry import lineage_versions

GROUPS = "SELECT trajectory_id FROM trajectories WHERE group_id IS NOT NULL"


def test_a_recorded_lineage_reads_the_same_training_set_after_the_lake_changed(lake: Lake) -> None:
    write_groups(lake, {"g1": [1.0, 0.0], "g2": [0.0, 1.0]})
    first = select_grpo(lake, GROUPS, reward_name="correct")
    recorded = first.lineage.to_dict()
    rewards_then = {e.trajectory_id: e.reward for e in first.examples}

    # The lake moves on: a new group, every old trajectory re-scored, g1 re-assembled and
    # moved to another day, then compaction and a vacuum (within the retention window).
    write_groups(lake, {"g3": [1.0, 0.0]})
    write(lake, "rewards", [reward(tid, 1.0 - value) for tid, value in rewards_then.items()])
    moved = connect(lake).execute(
        "SELECT * EXCLUDE (_written_at, dt) FROM trajectories WHERE group_id = 'g1'"
    )
    rows = moved.to_arrow_table().to_pylist()
    write(lake, "trajectories", [{**r, "started_at": r["started_at"].replace(year=2025)} for r in rows])
    compact(lake, CompactConfig(retention_hours=168))

    now = select_grpo(lake, GROUPS, reward_name="correct")
    assert now.lineage.trajectory_ids_digest != recorded["trajectory_ids_digest"]  # the lake did change

    again = select_grpo(lake, GROUPS, reward_name="correct", as_of=as_of_versions(recorded))
    assert again.lineage.trajectory_ids_digest == recorded["trajectory_ids_digest"]
    assert {e.trajectory_id: e.reward for e in again.examples} == rewards_then
    assert again.lineage.table_versions == recorded["table_versions"]


def test_published_lineage_versions_are_what_vacuum_keeps(lake: Lake) -> None:
    import json

    versions = {
        "trajectories": {"version": 3, "timestamp": None},
        "rewards": {"version": 7, "timestamp": None},
    }
    row = {
        "name": "a",
        "version": 1,
        "path": "/x",
        "stages": ["grpo"],
        "data": json.dumps([{"stage": "grpo", "table_versions": versions}]),
    }
    write(
        lake,
        "adapters",
        [
            row,
            {
                **row,
                "version": 2,
                "data": json.dumps([{"stage": "sft", "table_versions": {"rewards": {"version": 9}}}]),
            },
        ],
    )
    assert lineage_versions(lake) == {"trajectories": {3}, "rewards": {7, 9}}


def test_train_grpo_as_of_trains_on_the_recorded_snapshot(
    lake: Lake, tiny_model: Path, tmp_path: Path
) -> None:
    """`trajlake train grpo --as-of TABLE=VERSION` trains on the rows of those versions, and the
    run's lineage names them (as `train sft --as-of` does), whatever the lake holds now."""
    from typer.testing import CliRunner

    rows, rewards = stored_groups(str(tiny_model), groups=2, size=2)
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    then = {name: snapshot(lake)[name].version for name in ("trajectories", "rewards")}

    # The lake moves on: a third group arrives and every trajectory is re-scored.
    more, more_rewards = stored_groups(str(tiny_model), groups=3, size=2, seed=1)
    write(lake, "trajectories", [r for r in more if r["group_id"] == "g2"])
    write(
        lake,
        "rewards",
        [reward(r["trajectory_id"], 1.0 - r["value"], group_id=r["group_id"]) for r in more_rewards],
    )

    args = ["train", "grpo", "--base-model", str(tiny_model), "--output", str(tmp_path / "run")]
    args += ["--lake", lake.root, "--reward", "correct", "--max-steps", "1"]
    args += ["--batch-size", "4", "--set", 'save_strategy="no"', "--set", "activation_checkpointing=false"]
    args += [f"--as-of={name}={version}" for name, version in then.items()]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    record = json.loads((tmp_path / "run" / "adapter" / "trajlake_run.json").read_text())
    lineage = record["lineage"]
    assert {name: lineage["table_versions"][name]["version"] for name in then} == then
    assert lineage["trajectory_count"] == 4  # the two groups of then, not the third one
