"""No default training selection reads a val scenario: not its evaluation replays (GRPO), not the
production conversation it was cut from (SFT)."""

from __future__ import annotations

from pathlib import Path

from flows.config.options import value_in_effect
from flows.config.sections import Selections
from store.catalog.connection import connect
from store.lake import Lake
from store.selections import (
    GRPO_TRAJECTORIES,
    PRODUCTION_TRAJECTORIES,
    SFT_TRAJECTORIES,
    TRAIN_SCENARIOS,
    VAL_SCENARIOS,
    grpo_trajectories_of,
)
from store.writer import write
from tests.training.helpers import ScriptedSampler, calculator_script, make_trajectory
from training.replay.scenario_io import create_scenarios
from training.replay.scenarios import ScenarioConfig
from training.replay.stage import ReplayConfig, replay


def _ids(lake: Lake, sql: str) -> set[str]:
    with connect(lake, read_only=True) as con:
        return {row[0] for row in con.execute(sql).fetchall()}


def test_default_selections_never_read_a_val_scenario(lake: Lake, tiny_model: Path) -> None:
    write(lake, "trajectories", [make_trajectory(f"prod-{i}", has_content=True) for i in range(12)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories", ScenarioConfig(val_fraction=0.5))
    with connect(lake, read_only=True) as con:
        splits = dict(con.execute("SELECT scenario_id, split FROM scenarios").fetchall())
        cut_from_val = {
            r[0]
            for r in con.execute("SELECT source_trajectory_id FROM scenarios WHERE split = 'val'").fetchall()
        }
    assert set(splits.values()) == {"train", "val"}
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    # Training replays, then the evaluation's replays of every scenario (val included), as the pipeline does.
    replay(
        lake,
        "SELECT scenario_id FROM scenarios",
        sampler,
        ReplayConfig(group_size=2, run="r1"),
        progress=False,
    )
    replay(
        lake,
        "SELECT scenario_id FROM scenarios",
        sampler,
        ReplayConfig(group_size=2, run="eval"),
        progress=False,
    )
    with connect(lake, read_only=True) as con:
        rows = con.execute(
            "SELECT trajectory_id, scenario_id, scenario_split FROM trajectories WHERE source = 'replay'"
        ).fetchall()
    val_replays = {tid for tid, sid, _ in rows if splits[sid] == "val"}
    assert val_replays and all(split == "val" for tid, _, split in rows if tid in val_replays)

    grpo = _ids(lake, GRPO_TRAJECTORIES)
    assert grpo == {tid for tid, _, _ in rows} - val_replays
    # a pipeline round's GRPO selection (its groups, val ones included) keeps the same guard
    with connect(lake, read_only=True) as con:
        group_of = dict(con.execute("SELECT trajectory_id, group_id FROM trajectories").fetchall())
    val_group = next(group_of[t] for t in sorted(val_replays))
    train_group = next(group_of[t] for t in sorted(grpo))
    in_groups = {t for t, g in group_of.items() if g in (val_group, train_group)}
    assert _ids(lake, grpo_trajectories_of([val_group, train_group])) == in_groups - val_replays
    assert _ids(lake, grpo_trajectories_of(None)) == grpo
    sft = _ids(lake, Selections().sft)
    assert sft == {f"prod-{i}" for i in range(12)} - cut_from_val


def test_every_default_selection_is_declared_once() -> None:
    import inspect

    from flows.commands.train_cmds import publish_command
    from flows.commands.trl_cmds import train_grpo_command, train_sft_command

    def default(command: object, name: str) -> object:
        return inspect.signature(command).parameters[name].default  # type: ignore[arg-type]

    # the command line, the flow's [select] table and the libraries start from the same strings
    # `train sft --sql` left out takes `[select] sft` in effect, whose declared default is the store's
    assert default(train_sft_command, "sql") is None
    assert value_in_effect("select.sft")[0] is SFT_TRAJECTORIES is Selections().sft
    assert default(train_grpo_command, "sql") is GRPO_TRAJECTORIES
    assert default(publish_command, "eval_scenarios") is VAL_SCENARIOS is Selections().evaluate
    assert Selections().replay is TRAIN_SCENARIOS
    assert Selections().scenarios is PRODUCTION_TRAJECTORIES
