"""Langfuse scores -> `rewards` rows: every data type, both API shapes, the category mapping."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ingest.langfuse.sink import write_rewards
from ingest.records import BadRecord
from ingest.scores import DEFAULT_CATEGORY_VALUES, map_category, score_target, score_to_reward
from store.catalog.connection import connect

TS = "2026-08-01T10:05:00Z"
TRACE = {"kind": "trace", "id": "5b8efff798038103d269b633813fc60c"}


def v3(data_type: str, value: object, **extra: object) -> dict:
    return {
        "id": "sc-1",
        "name": "quality",
        "dataType": data_type,
        "value": value,
        "source": "API",
        "timestamp": TS,
        "environment": "production",
        "subject": TRACE,
        **extra,
    }


def reward(score: dict) -> dict:
    return score_to_reward(score, trajectory_id="traj-1", category_values=DEFAULT_CATEGORY_VALUES)


@pytest.mark.parametrize(
    ("score", "value", "status", "explanation"),
    [
        (
            v3("NUMERIC", 0.75, comment="good enough"),
            0.75,
            "ok",
            "good enough",
        ),  # number as is, comment explains
        (v3("NUMERIC", -2), -2.0, "ok", None),  # negative numbers are valid rewards
        (v3("BOOLEAN", True), 1.0, "ok", None),
        (v3("BOOLEAN", False), 0.0, "ok", None),  # a real zero, from a real false
        (v3("CATEGORICAL", "Pass"), 1.0, "ok", None),  # default mapping, case-insensitive
        (v3("CATEGORICAL", "incorrect"), 0.0, "ok", None),
        (v3("CATEGORICAL", "partial"), 0.5, "ok", None),
        (v3("CATEGORICAL", "4"), 4.0, "ok", None),  # numeric labels are numbers
        (v3("CATEGORICAL", "sarcastic"), None, "failed", "sarcastic"),  # unmapped: failed, never 0
        (v3("TEXT", "Cites the tool output."), None, "ok", "Cites the tool output."),
        (v3("CORRECTION", "It is 14C in Paris."), None, "ok", "It is 14C in Paris."),
    ],
)
def test_value_mapping_per_data_type(
    score: dict, value: float | None, status: str, explanation: str | None
) -> None:
    row = reward(score)
    assert row["value"] == value
    assert row["status"] == status
    assert row["explanation"] == explanation
    assert row["error"] == ("unmapped_category" if status == "failed" else None)
    assert row["scored_at"] == datetime(2026, 8, 1, 10, 5, tzinfo=UTC)
    meta = json.loads(row["metadata"])
    assert meta["langfuse_score_id"] == "sc-1" and meta["data_type"] == score["dataType"]


def test_scorer_names_source_and_observation() -> None:
    assert reward(v3("NUMERIC", 1))["scorer"] == "langfuse:api"
    assert reward(v3("NUMERIC", 1, source="ANNOTATION"))["scorer"] == "langfuse:annotation"
    obs = v3("NUMERIC", 1, subject={"kind": "observation", "id": "obs-9", "traceId": TRACE["id"]})
    assert reward(obs)["scorer"] == "langfuse:api@obs-9"
    assert score_target(obs).trace_id == TRACE["id"]


def test_v1_shapes_from_old_exports() -> None:
    base = {"id": "sc-2", "name": "ok", "traceId": "t-1", "timestamp": TS, "source": "EVAL"}
    assert reward({**base, "dataType": "BOOLEAN", "value": 1.0, "stringValue": "True"})["value"] == 1.0
    assert reward({**base, "dataType": "CATEGORICAL", "value": None, "stringValue": "good"})["value"] == 1.0
    assert reward({**base, "dataType": "NUMERIC", "value": 3})["value"] == 3.0
    assert score_target({**base, "observationId": "o-1"}).observation_id == "o-1"
    assert score_target({**base}).kind == "trace"


def test_user_mapping_overrides_the_defaults() -> None:
    mapping = {**DEFAULT_CATEGORY_VALUES, "sarcastic": 0.25, "pass": 0.9}
    row = score_to_reward(v3("CATEGORICAL", "sarcastic"), trajectory_id="t", category_values=mapping)
    assert row["value"] == 0.25 and row["status"] == "ok"
    assert map_category("PASS", mapping) == 0.9
    assert map_category("nan", {}) is None  # not a usable number


@pytest.mark.parametrize(
    ("score", "reason"),
    [
        ({**v3("NUMERIC", 1), "name": ""}, "missing_field"),
        ({k: v for k, v in v3("NUMERIC", 1).items() if k != "timestamp"}, "missing_field"),
        (v3("NUMERIC", "lots"), "bad_value"),
        (v3("NUMERIC", "NaN"), "bad_value"),  # not a zero, not a NaN that poisons every mean
        (v3("NUMERIC", float("inf")), "bad_value"),
        (v3("BOOLEAN", "maybe"), "bad_value"),
        (v3("RANKING", 1), "bad_value"),
    ],
)
def test_bad_scores_name_the_reason(score: dict, reason: str) -> None:
    with pytest.raises(BadRecord) as info:
        reward(score)
    assert info.value.reason == reason


def test_rewards_keep_the_newest_score_and_skip_unchanged_rewrites(lake) -> None:  # type: ignore[no-untyped-def]

    newer = reward(v3("NUMERIC", 0.9, timestamp="2026-08-01T11:00:00Z"))
    older = reward(v3("NUMERIC", 0.1, timestamp="2026-08-01T09:00:00Z"))
    assert write_rewards(lake, [newer, older]) == (1, {"score_superseded": 1})  # in-batch: newest wins
    assert write_rewards(lake, [older]) == (0, {"score_superseded": 1})  # the lake holds a newer one
    assert write_rewards(lake, [newer]) == (0, {"score_unchanged": 1})  # an overlap re-read writes nothing
    changed = {**newer, "explanation": "edited in the UI"}
    assert write_rewards(lake, [changed]) == (1, {})
    rows = connect(lake).sql("SELECT value, explanation FROM rewards").fetchall()
    assert rows == [(0.9, "edited in the UI")]
