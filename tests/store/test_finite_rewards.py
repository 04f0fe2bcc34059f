"""Every door that takes a reward keeps it finite (issue 45): the writer refuses NaN and +-inf in
`rewards.value` whoever offers it (a score over HTTP, a Langfuse pull, an imported file, a
scorer), naming the row; a null value (a failed score) stays allowed."""

from __future__ import annotations

import math

import pytest

from store.catalog.connection import connect
from store.errors import SchemaViolation
from store.lake import Lake
from store.rows import utc_now
from store.writer import write


def reward(i: int, value: float | None) -> dict[str, object]:
    return {
        "trajectory_id": f"t{i}",
        "name": "r",
        "scorer": "s",
        "value": value,
        "scored_at": utc_now(),
    }


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_reward_is_refused_and_nothing_is_written(lake: Lake, bad: float) -> None:
    with pytest.raises(SchemaViolation) as caught:
        write(lake, "rewards", [reward(0, 1.0), reward(1, bad)])
    assert (caught.value.table, caught.value.column, caught.value.row, caught.value.reason) == (
        "rewards",
        "value",
        1,
        "not_finite",
    )
    assert not lake.has_table("rewards")


def test_null_and_finite_rewards_are_written(lake: Lake) -> None:
    write(lake, "rewards", [reward(0, 0.5), reward(1, None)])
    with connect(lake) as con:
        assert sorted(con.execute("SELECT value FROM rewards").fetchall(), key=str) == [(0.5,), (None,)]
