"""Langfuse scores -> rows of the lake's `rewards` table: one mapping, pulled or pushed.

A score reaches trajlake two ways: pulled from a Langfuse server (`trajlake ingest
langfuse`) or pushed by a Langfuse SDK pointed at the collector (`POST
/api/public/scores`). Both go through `score_to_reward`, so the same score becomes the
same row, and a score that arrives both ways is one row, not two.

Value mapping, by the score's `dataType` (inferred from the value when a pushed score
omits it: a number is NUMERIC, a boolean BOOLEAN, a string CATEGORICAL):

- `NUMERIC`: the number as is; the comment becomes the explanation.
- `BOOLEAN`: 1.0 for true, 0.0 for false.
- `CATEGORICAL`: the label through `category_values` (case-insensitive; defaults in
  `DEFAULT_CATEGORY_VALUES`: pass/yes/correct/good... -> 1.0, fail/no/incorrect/bad...
  -> 0.0, neutral/partial -> 0.5); a numeric label is its number. An unmapped label is
  kept as a *failed* reward (`value` null, `status` 'failed', `error`
  'unmapped_category', the label in `explanation`), never a silent zero.
- `TEXT` and `CORRECTION`: no number (`value` null, `status` 'ok'); the text is the
  explanation.

`scorer` is `langfuse:<source>` (source = api, eval or annotation; the score's name is
already the reward's `name`), with `@<observation id>` appended for scores attached to
one observation, so several observation scores of the same name on one trace stay
apart. Session and experiment scores have no single trajectory and are not written.
Both the v3 API shape (`subject`, typed `value`) and the v1 shape of SDKs and older
exports (`traceId`, `observationId`, `stringValue`) are read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.records import BadRecord, parse_time, to_trace_id
from ingest.redact import RedactionConfig, redact_text

# How categorical score values become numbers when the user gives no mapping. Matching is
# case-insensitive on the stripped label; a label that is a number ("4", "0.5") is that
# number. Anything else is recorded as a failed reward (`unmapped_category`), never a zero.
DEFAULT_CATEGORY_VALUES: dict[str, float] = {
    **dict.fromkeys(
        (
            "true",
            "yes",
            "pass",
            "passed",
            "correct",
            "good",
            "positive",
            "success",
            "resolved",
            "thumbs_up",
            "thumbsup",
            "up",
            "helpful",
            "accept",
            "accepted",
            "👍",
        ),
        1.0,
    ),
    **dict.fromkeys(
        (
            "false",
            "no",
            "fail",
            "failed",
            "incorrect",
            "bad",
            "negative",
            "failure",
            "unresolved",
            "thumbs_down",
            "thumbsdown",
            "down",
            "unhelpful",
            "reject",
            "rejected",
            "👎",
        ),
        0.0,
    ),
    **dict.fromkeys(("neutral", "partial", "partially_correct", "mixed"), 0.5),
}


@dataclass(frozen=True)
class ScoreTarget:
    """What a score is attached to, as Langfuse names it."""

    kind: str  # trace, observation, session, experiment
    trace_id: str | None  # the Langfuse trace id (not yet hex-normalised)
    observation_id: str | None


def score_target(score: Mapping[str, Any]) -> ScoreTarget:
    """Where a score points, for the v3 (`subject`) and v1 (`traceId`...) shapes."""
    subject = score.get("subject")
    if isinstance(subject, Mapping):
        kind = str(subject.get("kind") or "")
        if kind == "trace":
            return ScoreTarget("trace", subject.get("id"), None)
        if kind == "observation":
            return ScoreTarget("observation", subject.get("traceId"), subject.get("id"))
        return ScoreTarget(kind or "unknown", None, None)
    if score.get("observationId"):
        return ScoreTarget("observation", score.get("traceId"), score["observationId"])
    if score.get("traceId"):
        return ScoreTarget("trace", score["traceId"], None)
    if score.get("sessionId"):
        return ScoreTarget("session", None, None)
    return ScoreTarget("unknown", None, None)


def scorer_of(score: Mapping[str, Any], target: ScoreTarget) -> str:
    """`langfuse:<source>`, plus `@<observation id>` for observation scores."""
    source = str(score.get("source") or "api").lower()
    scorer = f"langfuse:{source}"
    if target.kind == "observation" and target.observation_id:
        scorer += f"@{target.observation_id}"
    return scorer


def _label(score: Mapping[str, Any]) -> str | None:
    value = score.get("value")
    if isinstance(value, str):
        return value
    string_value = score.get("stringValue")
    return string_value if isinstance(string_value, str) else None


def map_category(label: str, category_values: Mapping[str, float]) -> float | None:
    """The reward value of a categorical label, or None when no mapping applies.

    >>> map_category(" Pass ", {"pass": 1.0})
    1.0
    >>> map_category("3", {}) , map_category("meh", {"pass": 1.0})
    (3.0, None)
    """
    key = label.strip().lower()
    if key in category_values:
        return float(category_values[key])
    try:
        number = float(key)
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def score_to_reward(
    score: Mapping[str, Any],
    *,
    trajectory_id: str,
    category_values: Mapping[str, float] = DEFAULT_CATEGORY_VALUES,
    received_at: datetime | None = None,
    redaction: RedactionConfig | None = None,
) -> dict[str, Any]:
    """One score as a `rewards` row. Raises `BadRecord` for a score without a name or an
    understandable value, or without a timestamp when no `received_at` stands in for it
    (a score pushed by an SDK is timed when it arrives; a pulled one must say when)."""
    name = score.get("name")
    score_id = score.get("id")
    if not isinstance(name, str) or not name:
        raise BadRecord("missing_field", f"score `{score_id}` has no `name`")
    if score.get("timestamp") is None and received_at is None:
        raise BadRecord("missing_field", f"score `{score_id}` has no `timestamp`")
    scored_at = (
        parse_time(score["timestamp"], f"score {score_id}.timestamp")
        if score.get("timestamp") is not None
        else received_at
    )
    data_type = str(score.get("dataType") or _inferred_type(score.get("value"))).upper()
    target = score_target(score)
    comment = score.get("comment")
    if isinstance(comment, str):
        comment = redact_text(comment, redaction)
    elif comment is not None:
        comment = str(comment)
    value: float | None
    explanation = comment
    status, error = "ok", None
    raw = score.get("value")

    if data_type == "NUMERIC":
        value = _number(raw, f"`{name}` ({score_id})" if score_id else f"`{name}`")
    elif data_type == "BOOLEAN":
        value = _boolean(raw, score.get("stringValue"), score_id)
    elif data_type == "CATEGORICAL":
        label = _label(score)
        if label is None:
            raise BadRecord("bad_value", f"categorical score `{score_id}` has no label")
        value = map_category(label, category_values)
        if value is None:
            status, error = "failed", "unmapped_category"
            explanation = label if not comment else f"{label}: {comment}"
    elif data_type in ("TEXT", "CORRECTION"):
        value = None
        explanation = _label(score) if _label(score) is not None else comment
    else:
        raise BadRecord("bad_value", f"score `{score_id}` has unknown dataType `{data_type}`")

    metadata = {
        "langfuse_score_id": score_id,
        "data_type": data_type,
        "source": score.get("source"),
        "subject": target.kind,
        "langfuse_trace_id": target.trace_id,
        "observation_id": target.observation_id,
        "label": _label(score) if data_type == "CATEGORICAL" else None,
        "comment": comment if data_type in ("TEXT", "CORRECTION") else None,
        "config_id": score.get("configId"),
        "environment": score.get("environment"),
        "score_metadata": score.get("metadata") or None,
    }
    return {
        "trajectory_id": trajectory_id,
        "name": name,
        "scorer": scorer_of(score, target),
        "value": value,
        "explanation": explanation,
        "group_id": None,
        "scored_at": scored_at,
        "run_id": None,
        "status": status,
        "error": error,
        "metadata": json.dumps(
            {k: v for k, v in metadata.items() if v is not None}, ensure_ascii=False, default=str
        ),
    }


def _number(raw: Any, score: str) -> float:
    try:
        number = float(raw)
    except (TypeError, ValueError):
        raise BadRecord("bad_value", f"numeric score {score} has value {raw!r}") from None
    if not math.isfinite(number):  # "NaN" or "Infinity" would poison every mean over the reward
        raise BadRecord(
            "bad_value", f"numeric score {score} has value {raw!r}; scores must be finite numbers"
        )
    return number


def _boolean(raw: Any, string_value: Any, score_id: Any) -> float:
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (int, float)) and raw in (0, 1):
        return float(raw)
    text = str(string_value if string_value is not None else raw).strip().lower()
    if text in ("true", "1", "yes"):
        return 1.0
    if text in ("false", "0", "no"):
        return 0.0
    raise BadRecord("bad_value", f"boolean score `{score_id}` has value {raw!r}")


def _inferred_type(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    return "CATEGORICAL" if isinstance(value, str) else "NUMERIC"


# --- pushed scores: `POST /api/public/scores` --------------------------------------------------


@dataclass
class ScoreBatch:
    """A scores request body as reward rows, with a reason for each score that was refused."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def scores_to_rewards(
    body: Any,
    *,
    received_at: datetime,
    category_values: Mapping[str, float] = DEFAULT_CATEGORY_VALUES,
    redaction: RedactionConfig | None = None,
) -> ScoreBatch:
    """Reward rows of a scores request body (a list, or one score object).

    A trace's score belongs to the trajectory of its trace's run (`trajectory_id` is the
    trace id, as `assemble` names it); scores that point at no trace are refused with a
    reason, as Langfuse's own 207 answer does.
    """
    batch = ScoreBatch()
    for index, score in enumerate(body if isinstance(body, list) else [body]):
        if not isinstance(score, Mapping):
            batch.errors.append(f"[{index}] a score must be an object, got {type(score).__name__}")
            continue
        target = score_target(score)
        if not target.trace_id or not isinstance(target.trace_id, str):
            batch.errors.append(
                f"[{index}] score `{score.get('name')}` names no trace (a {target.kind} score): "
                "trajlake stores scores of traces (trajectories) only"
            )
            continue
        try:
            batch.rows.append(
                score_to_reward(
                    score,
                    trajectory_id=to_trace_id(target.trace_id),
                    category_values=category_values,
                    received_at=received_at,
                    redaction=redaction,
                )
            )
        except BadRecord as exc:
            batch.errors.append(f"[{index}] {exc}")
    return batch
