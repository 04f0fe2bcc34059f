"""Scores posted to the collector's `/api/public/scores`: which become rewards, which are refused and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ingest.scores import scores_to_rewards

TRACE = "ab" * 16


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_are_refused_not_stored(value: float) -> None:
    # `json.loads` accepts the non-standard `NaN` and `Infinity` literals some clients send.
    body = json.loads(
        json.dumps(
            [
                {"traceId": TRACE, "name": "helpful", "value": value},
                {"traceId": TRACE, "name": "ok", "value": 0.5},
            ]
        )
    )
    batch = scores_to_rewards(body, received_at=datetime.now(UTC))
    assert [row["name"] for row in batch.rows] == ["ok"]
    assert batch.rows[0]["value"] == 0.5 and batch.rows[0]["status"] == "ok"
    assert len(batch.errors) == 1 and batch.errors[0].startswith("[0] bad_value: numeric score `helpful`")
    assert "finite" in batch.errors[0]
