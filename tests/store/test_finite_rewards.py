"""Every door that takes a reward keeps it finite (issue 45): the writer refuses NaN and +-inf in
`rewards.value` whoever offers it (a score over HTTP, a Langfuse pull, an imported file, a
scorer), naming the row; a null value (a failed score) stays allowed."""

from __future__ import annotations

import math

import pytest

import store
from store.errors import SchemaViolation


def reward(i: int, value: float | None) -> dict[str, object]:
    return {
        "trajectory_id": f"t{i}",
        "name": "r",
        "scorer": "s",
        "value": value,
        "scored_at": store.utc_now(),
    }


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_reward_is_refused_and_nothing_is_written(lake: store.Lake, bad: float) -> None:
    with pytest.raises(SchemaViolation) as caught:
        store.write(lake, "rewards", [reward(0, 1.0), reward(1, bad)])
    assert (caught.value.table, caught.value.column, caught.value.row, caught.value.reason) == (
        "rewards",
        "value",
        1,
        "not_finite",
    )
    assert not lake.has_table("rewards")


def test_null_and_finite_rewards_are_written(lake: store.Lake) -> None:
    store.write(lake, "rewards", [reward(0, 0.5), reward(1, None)])
    with store.connect(lake) as con:
        assert sorted(con.execute("SELECT value FROM rewards").fetchall(), key=str) == [(0.5,), (None,)]
