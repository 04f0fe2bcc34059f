"""`pipeline.sft_excludes_replayed`: SFT leaves out the conversations a run's GRPO rounds replay,
so GRPO samples questions the SFT policy did not learn by heart."""

from __future__ import annotations

from pathlib import Path

from flows.config.checks import load_config
from flows.config.root import Settings
from flows.stages import sft_selections
from flows.stages.replay import round_scenarios
from store.catalog.connection import connect
from store.writer import write
from tests.training.helpers import make_trajectory
from training.replay.scenario_io import create_scenarios


def settings(tmp_path: Path, *, excludes: bool, per_round: int, draws: int = 0) -> Settings:
    path = tmp_path / "t.toml"
    path.write_text(
        f"[pipeline]\nscenarios_per_round = {per_round}\ndynamic_sampling_draws = {draws}\n"
        f"sft_excludes_replayed = {str(excludes).lower()}\n"
        '[select]\nreplay = "SELECT scenario_id FROM scenarios"\nsft = "SELECT trajectory_id FROM trajectories"\n'
    )
    return load_config(path)


def test_sft_leaves_out_what_the_rounds_replay(tmp_path: Path, lake) -> None:  # type: ignore[no-untyped-def]
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(40)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    cfg = settings(tmp_path, excludes=True, per_round=3, draws=1)
    con = connect(lake)

    def rows(sql: str) -> set[str]:
        return {r[0] for r in con.execute(sql).fetchall()}

    replayed = set()
    for round_number in (1, 2):
        for draw in (0, 1):
            replayed |= rows(
                "SELECT source_trajectory_id FROM scenarios WHERE scenario_id IN "
                f"({round_scenarios(lake, round_number, draw, select=cfg.select, pipeline=cfg.pipeline)})"
            )
    assert len(replayed) == 12  # two rounds, each a slice and a draw's slice of 3
    sft = rows(sft_selections(lake, cfg.select, 2, pipeline=cfg.pipeline).sft)
    assert sft == {f"t{i}" for i in range(40)} - replayed

    # one round: only its slice and its draw's are left out
    assert len(rows(sft_selections(lake, cfg.select, 1, pipeline=cfg.pipeline).sft)) == 40 - 6

    # without slices every round replays every scenario: SFT keeps only what no scenario was cut from
    everything = settings(tmp_path, excludes=True, per_round=0)
    assert rows(sft_selections(lake, everything.select, 1, pipeline=everything.pipeline).sft) == set()


def test_off_sft_reads_its_whole_selection(tmp_path: Path, lake) -> None:  # type: ignore[no-untyped-def]
    cfg = settings(tmp_path, excludes=False, per_round=3)
    assert sft_selections(lake, cfg.select, 3, pipeline=cfg.pipeline) == cfg.select
