"""Labels: what a conversation's right outcome was, as rows of the lake's `labels` table.

A label is data, not a setting: the right answer (`expected`) and/or a verdict on the
conversation's own answer (`verdict`, in [0, 1]), with where it came from (`source`) and
whose conversation it is (`user_id`, so `trajlake forget --user` erases it). Three ways in:

- with the user's feedback over OTLP: a `gen_ai.evaluation.result` record carrying
  `trajlake.label.expected` (`ingest.assembly.feedback.label_rows`, written with the
  trace's trajectories);
- from a JSONL file (`trajlake labels import FILE.jsonl`, `import_labels` here): one object a
  line, every line checked before anything is written;
- from a Langfuse `CORRECTION` score pulled by `trajlake ingest langfuse` (`correction_label`).

A line of a labels file:

    {"trace_id": "4bf9...", "expected": "42", "verdict": 0, "user_id": "u-7", "comment": "..."}

The same file carries the user's feedback on traced conversations, as `ingest.feedback` sends
it from the agent: a line's `feedback` (a number, or a boolean: true is 1.0) is the
conversation's `user_feedback` reward (scorer `file`, the `comment` as its explanation), what
production's success is measured by.

    {"trace_id": "4bf9...", "feedback": false, "comment": "wrong unit", "expected": "12 km"}

`trajectory_id` or `trace_id` (at least one) names the conversation: a trace id alone is
resolved to the trace's conversation in the lake (an unknown trace names its own run, as
assembly names a trace's single run). Optional: `expected` (any JSON value), `verdict` (a
number in [0, 1] or a boolean), `name` (default `expected`), `user_id` (default: the
conversation's), `labeled_by`, `comment`, `labeled_at` (ISO 8601), `source` (`file` unless
`person`), `metadata` (an object), `feedback`. A line needs `expected`, `verdict` or `feedback`;
a label row is written for `expected` or `verdict`, a reward row for `feedback`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from ingest.errors import MalformedPayload
from ingest.jsonl.lines import DEFAULT_MAX_LINE_BYTES, read_lines
from ingest.scores import score_text
from store.catalog.connection import connect
from store.lake import Lake
from store.rows import utc_now
from store.schema import LABELS, REWARDS
from store.vocabulary import PRODUCTION_SOURCES, one_of
from store.writer import write

FIX = "fix the file and import it again"
DEFAULT_NAME = "expected"
FIELDS = (
    "trajectory_id",
    "trace_id",
    "expected",
    "verdict",
    "name",
    "user_id",
    "labeled_by",
    "comment",
    "labeled_at",
    "source",
    "metadata",
    "feedback",
)
FEEDBACK_NAME = "user_feedback"  # the reward `ingest.feedback` and Langfuse scores write
FEEDBACK_SCORER = "file"
# The attribute of a `gen_ai.evaluation.result` record that carries the right answer, as text.
EXPECTED_ATTRIBUTE = "trajlake.label.expected"


class LabelError(ValueError):
    """What is wrong with one label (the loader adds where it is)."""


@dataclass(frozen=True)
class LabelImport:
    """What an import wrote: label rows, and how many named a conversation the lake has."""

    labels: int
    files: int
    matched: int  # lines whose conversation is in the lake now
    feedback: int = 0  # `user_feedback` reward rows


def expected_of_text(text: str) -> str:
    """The `expected` JSON of a right answer sent as text: the shape a conversation rated right
    gives its scenario (`{"final_output": ...}`), so rewards read both alike.

    >>> expected_of_text("42")
    '{"final_output": "42"}'
    """
    return json.dumps({"final_output": text}, ensure_ascii=False)


def correction_label(
    score: Mapping[str, Any], reward: Mapping[str, Any], *, trace_id: str, user_id: str | None
) -> dict[str, Any] | None:
    """The `labels` row of a `CORRECTION` score, or None for any other score or an empty one.

    Langfuse's correction is the output the trace should have had: the row says so as
    `ingest.feedback`'s `correct_answer` does (`expected` `{"final_output": text}`, source
    `feedback`), so a scenario cut from the conversation takes it as its expected answer.
    `reward`: the score's row from `score_to_reward` (its time and scorer).

    >>> score = {"id": "s1", "name": "correction", "dataType": "CORRECTION", "value": "sold out"}
    >>> reward = {"trajectory_id": "t1", "scorer": "langfuse:annotation", "scored_at": None}
    >>> correction_label(score, reward, trace_id="ab", user_id="u-1")["expected"]
    '{"final_output": "sold out"}'
    """
    data_type = str(score.get("dataType") or "").upper()
    text = score_text(score)
    if data_type != "CORRECTION" or text is None or not text.strip():
        return None
    comment = score.get("comment")
    return {
        "trajectory_id": reward["trajectory_id"],
        "name": "expected",
        "trace_id": trace_id,
        "expected": expected_of_text(text),
        "verdict": None,
        "source": "feedback",
        "user_id": user_id,
        "labeled_by": reward["scorer"],
        "comment": None if comment is None else str(comment),
        "labeled_at": reward["scored_at"],
        "metadata": json.dumps({"langfuse_score_id": score.get("id"), "score_name": score.get("name")}),
    }


def _string(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise LabelError(f"`{key}` must be a non-empty string, got {json.dumps(value)[:40]}")
    return value


def _verdict(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return float(value)
    raise LabelError(f"`verdict` must be a number in [0, 1] or a boolean, got {json.dumps(value)[:40]}")


def _feedback(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    raise LabelError(f"`feedback` must be a finite number or a boolean, got {json.dumps(value)[:40]}")


def feedback_row(row: dict[str, Any], value: float) -> dict[str, Any]:
    """The `user_feedback` reward row (`value`) of a resolved line."""
    return {
        "trajectory_id": row["trajectory_id"],
        "name": FEEDBACK_NAME,
        "scorer": FEEDBACK_SCORER,
        "value": value,
        "explanation": row["comment"],
        "scored_at": row["labeled_at"],
        "status": "ok",
        "metadata": json.dumps(
            {"trace_id": row["trace_id"], "labeled_by": row["labeled_by"]}, sort_keys=True
        ),
    }


def label_row(obj: Any, *, now: datetime) -> dict[str, Any]:
    """One label object as a `labels` row (`trajectory_id` may still be the trace id; see
    `resolve`). Raises `LabelError` naming the field that is wrong.

    >>> row = label_row({"trace_id": "ab" * 16, "expected": "7"}, now=datetime(2026, 1, 1, tzinfo=UTC))
    >>> row["trajectory_id"] == "ab" * 16, row["expected"], row["source"], row["name"]
    (True, '"7"', 'file', 'expected')
    """
    if not isinstance(obj, dict):
        raise LabelError(f"a label must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise LabelError(f"unknown field `{unknown[0]}`; a label's fields: {', '.join(FIELDS)}")
    trajectory_id, trace_id = _string(obj, "trajectory_id"), _string(obj, "trace_id")
    if trajectory_id is None and trace_id is None:
        raise LabelError("a label names its conversation: give `trajectory_id` or `trace_id`")
    verdict = _verdict(obj.get("verdict"))
    feedback = _feedback(obj.get("feedback"))
    if obj.get("expected") is None and verdict is None and feedback is None:
        raise LabelError(
            "a label says something: give `expected` (the right answer), `verdict` or `feedback`"
        )
    source = obj.get("source", "file")
    if source not in ("file", "person"):
        raise LabelError(f"`source` is `{source}`; a file's labels are `file` or `person`")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise LabelError("`metadata` must be an object")
    labeled_at = now
    if obj.get("labeled_at") is not None:
        text = _string(obj, "labeled_at") or ""
        try:
            labeled_at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise LabelError(f"`labeled_at` `{text[:40]}` is not an ISO 8601 time") from None
        labeled_at = labeled_at if labeled_at.tzinfo else labeled_at.replace(tzinfo=UTC)
    return {
        "trajectory_id": trajectory_id or trace_id,
        "name": _string(obj, "name") or DEFAULT_NAME,
        "trace_id": trace_id,
        "expected": None if obj.get("expected") is None else json.dumps(obj["expected"], ensure_ascii=False),
        "verdict": verdict,
        "source": source,
        "user_id": _string(obj, "user_id"),
        "labeled_by": _string(obj, "labeled_by"),
        "comment": _string(obj, "comment"),
        "labeled_at": labeled_at.astimezone(UTC),
        "metadata": json.dumps(metadata) if metadata else None,
        "_named_trajectory": trajectory_id is not None,
        "_feedback": feedback,
        "_label": obj.get("expected") is not None or verdict is not None,
    }


def _conversations(
    lake: Lake, rows: list[dict[str, Any]]
) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """(trajectory_id, trace_id, user_id) of the production conversations the rows name, by the
    id each row gave (a trajectory id, or a trace id)."""
    if not lake.has_table("trajectories"):
        return {}
    wanted = sorted({r["trajectory_id"] for r in rows} | {r["trace_id"] for r in rows if r["trace_id"]})
    with connect(lake, read_only=True) as con:
        con.register("__ids", pa.table({"v": pa.array(wanted, pa.string())}))
        found = con.sql(
            "SELECT trajectory_id, trace_id, user_id FROM trajectories "
            f"WHERE {one_of('source', PRODUCTION_SOURCES, table='trajectories')} "
            "AND (trajectory_id IN (SELECT v FROM __ids) OR trace_id IN (SELECT v FROM __ids)) "
            "ORDER BY trajectory_id"
        ).fetchall()
    by_id: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for trajectory_id, trace_id, user_id in found:
        by_id.setdefault(trajectory_id, []).append((trajectory_id, trace_id, user_id))
        if trace_id:
            by_id.setdefault(f"trace:{trace_id}", []).append((trajectory_id, trace_id, user_id))
    return by_id


def resolve(row: dict[str, Any], known: dict[str, list[tuple[str, str | None, str | None]]]) -> bool:
    """Fill a row's conversation and user from the lake; True when the lake has the conversation.
    Raises `LabelError` for a trace id with several conversations (name the `trajectory_id`)."""
    named = row.pop("_named_trajectory")
    matches = known.get(row["trajectory_id"]) if named else known.get(f"trace:{row['trace_id']}")
    if not named and matches and len(matches) > 1:
        ids = ", ".join(m[0] for m in matches[:3])
        raise LabelError(
            f"trace `{row['trace_id']}` holds {len(matches)} conversations ({ids}...); name the `trajectory_id`"
        )
    if not matches:
        return False
    trajectory_id, trace_id, user_id = matches[0]
    row["trajectory_id"] = trajectory_id
    row["trace_id"] = row["trace_id"] or trace_id
    row["user_id"] = row["user_id"] or user_id
    return True


def import_labels(
    lake: Lake | str | os.PathLike[str],
    paths: Sequence[str | os.PathLike[str]],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> LabelImport:
    """Import labels and feedback from JSONL files (one commit per table: `labels`, then the
    `user_feedback` rows of `rewards`); `MalformedPayload` naming `file:line` for the first bad
    line, or a conversation labelled (or rated) twice, and nothing is written."""
    lake = Lake.of(lake)
    now = utc_now()
    rows, where_of = [], []
    for path in paths:
        for number, obj in read_lines(path, max_line_bytes, what="label"):
            where = f"{path}:{number}"
            try:
                rows.append(label_row(obj, now=now))
            except LabelError as exc:
                raise MalformedPayload("label", str(exc), path=where, fix=FIX) from None
            where_of.append(where)
    known = _conversations(lake, rows) if rows else {}
    matched = 0
    seen: dict[tuple[str, str], str] = {}
    rated: dict[str, str] = {}
    labels, feedback = [], []
    for row, where in zip(rows, where_of, strict=True):
        try:
            matched += resolve(row, known)
        except LabelError as exc:
            raise MalformedPayload("label", str(exc), path=where, fix=FIX) from None
        value, is_label = row.pop("_feedback"), row.pop("_label")
        key = (row["trajectory_id"], row["name"])
        again = (
            f"is labelled `{key[1]}` again (first at {seen[key]}); one label per conversation and name"
            if is_label and key in seen
            else f"has `feedback` again (first at {rated[key[0]]}); one per conversation"
            if value is not None and key[0] in rated
            else None
        )
        if again:
            raise MalformedPayload("label", f"conversation `{key[0]}` {again}", path=where, fix=FIX)
        if is_label:
            seen[key] = where
            labels.append(row)
        if value is not None:
            rated[key[0]] = where
            feedback.append(feedback_row(row, value))
    if labels:
        write(lake, LABELS.name, labels)
    if feedback:
        write(lake, REWARDS.name, feedback)
    return LabelImport(labels=len(labels), files=len(paths), matched=matched, feedback=len(feedback))
