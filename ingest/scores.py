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
  explanation. A `CORRECTION` (Langfuse's corrected output of a trace) is also a label: the
  conversation's right answer (`ingest.labels.correction_label`), what scenarios take as `expected`.

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
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ingest.records import BadRecord, check_time, parse_time, to_trace_id
from ingest.redact import RedactionConfig, redact_rows

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
    """Where a score points, for the v3 (`subject`) and v1 (`traceId`...) shapes.
    Raises `BadRecord` (`bad_field`) for an id that is not a string."""
    target = _target(score)
    if isinstance(score.get("subject"), Mapping):
        fields = {"trace": ("subject.id", None), "observation": ("subject.traceId", "subject.id")}
        trace_field, observation_field = fields.get(target.kind, ("subject.id", None))
    else:
        trace_field, observation_field = "traceId", "observationId"
    for name, value in ((trace_field, target.trace_id), (observation_field, target.observation_id)):
        if value is not None and not isinstance(value, str):
            raise BadRecord("bad_field", f"`{name}` must be a string, got {type(value).__name__}")
    return target


def _target(score: Mapping[str, Any]) -> ScoreTarget:
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


def score_text(score: Mapping[str, Any]) -> str | None:
    """A score's text value (a category's label, a comment score's text, a correction), or None."""
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
    if score_id is not None and not isinstance(score_id, str):
        raise BadRecord("bad_field", f"score `{name}`: `id` must be a string, got {type(score_id).__name__}")
    if score.get("timestamp") is None and received_at is None:
        raise BadRecord("missing_field", f"score `{score_id}` has no `timestamp`")
    scored_at = (
        check_time(
            parse_time(score["timestamp"], f"score {score_id}.timestamp"),
            "timestamp",
            received_at or datetime.now(UTC),
        )
        if score.get("timestamp") is not None
        else received_at
    )
    data_type = str(score.get("dataType") or _inferred_type(score.get("value"))).upper()
    target = score_target(score)
    comment = score.get("comment")
    if comment is not None and not isinstance(comment, str):
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
        label = score_text(score)
        if label is None:
            raise BadRecord("bad_value", f"categorical score `{score_id}` has no label")
        value = map_category(label, category_values)
        if value is None:
            status, error = "failed", "unmapped_category"
            explanation = label if not comment else f"{label}: {comment}"
    elif data_type in ("TEXT", "CORRECTION"):
        value = None
        explanation = score_text(score) if score_text(score) is not None else comment
    else:
        raise BadRecord("bad_value", f"score `{score_id}` has unknown dataType `{data_type}`")

    metadata = {
        "langfuse_score_id": score_id,
        "data_type": data_type,
        "source": score.get("source"),
        "subject": target.kind,
        "langfuse_trace_id": target.trace_id,
        "observation_id": target.observation_id,
        "label": score_text(score) if data_type == "CATEGORICAL" else None,
        "comment": comment if data_type in ("TEXT", "CORRECTION") else None,
        "config_id": score.get("configId"),
        "environment": score.get("environment"),
        "score_metadata": score.get("metadata") or None,
    }
    try:
        metadata_json = json.dumps(
            {k: v for k, v in metadata.items() if v is not None}, ensure_ascii=False, default=str
        )
    except (ValueError, RecursionError) as exc:
        raise BadRecord("bad_field", f"score `{score_id}`: `metadata` cannot be stored ({exc})") from None
    row = {
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
        "metadata": metadata_json,
    }
    _check_unicode(row, score_id)
    if redaction is not None:
        redact_rows([row], redaction)
    return row


# Where a row's text comes from in the score, to name the field of a bad character.
_FIELD_OF = {"explanation": "comment", "scorer": "source", "metadata": "metadata"}


def _check_unicode(row: dict[str, Any], score_id: Any) -> None:
    # JSON may carry lone surrogates (`"\ud800"`), which no UTF-8 column can hold.
    for column, text in row.items():
        if isinstance(text, str):
            try:
                text.encode()
            except UnicodeEncodeError as exc:
                field = _FIELD_OF.get(column, column)
                who = f"score `{score_id}`: " if score_id else ""
                raise BadRecord(
                    "bad_text", f"{who}`{field}` is not valid Unicode ({exc.reason} at position {exc.start})"
                ) from None


def _number(raw: Any, score: str) -> float:
    try:
        number = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise BadRecord(
            "bad_value", f"numeric score {score}: `value` {str(raw)[:40]!r} is not a number"
        ) from None
    if not math.isfinite(number):  # "NaN" or "Infinity" would poison every mean over the reward
        raise BadRecord(
            "bad_value", f"numeric score {score}: `value` is {str(raw)[:40]!r}; scores must be finite numbers"
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
    """A scores request body as reward rows, with a reason for each score that was refused.

    `ids` are the Langfuse ids of the stored scores, in `rows` order (a score sent without
    one gets a new id, as Langfuse gives it); `errors` name the score by its index in the
    request and the field that was wrong."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    scores: list[Mapping[str, Any]] = field(default_factory=list)  # as sent, in `rows` order
    trace_ids: list[str] = field(default_factory=list)  # each row's trace, in `rows` order


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
    reason, as Langfuse's own 207 answer does. One bad score never refuses another: each
    is checked on its own (values, times, text that UTF-8 can hold), and every row is
    redacted, all at once at the end.
    """
    batch = ScoreBatch()
    for index, score in enumerate(body if isinstance(body, list) else [body]):
        if not isinstance(score, Mapping):
            batch.errors.append(f"[{index}] a score must be an object, got {type(score).__name__}")
            continue
        try:
            target = score_target(score)
        except BadRecord as exc:
            batch.errors.append(f"[{index}] {exc}")
            continue
        if not target.trace_id:
            batch.errors.append(
                f"[{index}] score `{score.get('name')}` names no trace (a {target.kind} score): "
                "trajlake stores scores of traces (trajectories) only"
            )
            continue
        try:
            row = score_to_reward(
                score,
                trajectory_id=to_trace_id(target.trace_id),
                category_values=category_values,
                received_at=received_at,
            )
        except BadRecord as exc:
            batch.errors.append(f"[{index}] {exc}")
            continue
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            # Anything else the mapping trips on is still this score's problem, not the batch's.
            batch.errors.append(f"[{index}] bad_value: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if score.get("id") is None:  # Langfuse gives a score sent without an id a new one
            score_id = str(uuid.uuid4())
            row["metadata"] = json.dumps({"langfuse_score_id": score_id, **json.loads(row["metadata"])})
        batch.rows.append(row)
        batch.ids.append(score_id if score.get("id") is None else score["id"])
        batch.scores.append(score)
        batch.trace_ids.append(to_trace_id(target.trace_id))
    redact_rows(batch.rows, redaction)
    return batch
