"""Dynamic sampling (DAPO), bounded: a round replays further slices of scenarios while too few of
its groups have unequal rewards, and reports what it kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config.checks import load_config
from flows.config.root import Settings
from flows.stages import PolicyReplay, RoundScores, sample_round
from flows.stages.replay import round_scenarios
from judging.summary import RewardStats
from store.catalog.connection import connect
from store.writer import write
from tests.training.helpers import make_trajectory
from training.replay.scenario_io import create_scenarios


def config(tmp_path: Path, draws: int, per_round: int = 4) -> Settings:
    path = tmp_path / "t.toml"
    path.write_text(f"[pipeline]\nscenarios_per_round = {per_round}\ndynamic_sampling_draws = {draws}\n")
    return load_config(path)


class FakeRound:
    """Replays 4 groups per draw; `informative[d]` of draw d's groups have unequal rewards."""

    def __init__(self, informative: list[int]) -> None:
        self.informative = informative
        self.draws: list[int] = []
        self.scored_rounds: list[int] = []  # the round each scoring named (the flow's step names)

    def replay(self, adapter: str | None, round_number: int, draw: int) -> PolicyReplay:
        self.draws.append(draw)
        ids = [f"r{round_number}-d{draw}-g{i}" for i in range(4)]
        return PolicyReplay("p", ids, trajectories=8, generated_tokens=10, failed=0, seconds=1.0)

    def score(self, group_ids: list[str], round_number: int) -> RoundScores:
        self.scored_rounds.append(round_number)
        draws = sorted({int(g.split("-d")[1].split("-")[0]) for g in group_ids})
        equal = sum(4 - self.informative[d] for d in draws)
        return RoundScores(RewardStats("r", mean=0.5, std=0.1, scored=8 * len(draws), equal_groups=equal), [])


@pytest.mark.parametrize(
    ("informative", "draws", "expected_draws", "equal"),
    [
        ([4], 2, [0], 0),  # every group informative: no extra draw
        ([1, 2, 3], 2, [0, 1, 2], 6),  # 1, then 3, then 6 >= 4 informative groups: two extra draws
        ([1, 3, 4], 2, [0, 1], 4),  # 1 + 3 reach the 4 wanted after one extra draw
        ([0, 0, 0, 0], 2, [0, 1, 2], 12),  # bounded: never more than `dynamic_sampling_draws`
        ([0], 0, [0], 4),  # off
    ],
)
def test_extra_draws_until_enough_groups_are_informative(
    tmp_path: Path, informative: list[int], draws: int, expected_draws: list[int], equal: int
) -> None:
    fake = FakeRound(informative)
    replayed, scored = sample_round(
        "adapter", 3, pipeline=config(tmp_path, draws).pipeline, replay=fake.replay, score=fake.score
    )
    assert fake.draws == expected_draws and fake.scored_rounds == [3] * len(expected_draws)
    assert replayed.groups == 4 * len(expected_draws) == len(replayed.group_ids)
    assert replayed.draws == len(expected_draws) - 1 and replayed.trajectories == 8 * len(expected_draws)
    assert scored.stats.equal_groups == equal  # the stats cover every draw's groups


def test_draws_take_fresh_slices(tmp_path: Path, lake) -> None:  # type: ignore[no-untyped-def]
    """Round r, draw d reads slice (r - 1) * (1 + draws) + d, so draws never repeat a round's slice."""
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(40)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    cfg = config(tmp_path, draws=1, per_round=3).with_values(
        "select", replay="SELECT scenario_id FROM scenarios"
    )
    con = connect(lake)

    def ids(round_number: int, draw: int) -> set[str]:
        scenarios = round_scenarios(lake, round_number, draw, select=cfg.select, pipeline=cfg.pipeline)
        return {r[0] for r in con.execute(scenarios).fetchall()}

    slices = [ids(1, 0), ids(1, 1), ids(2, 0), ids(2, 1)]
    assert all(len(s) == 3 for s in slices)
    assert len(set().union(*slices)) == 12  # four different slices
