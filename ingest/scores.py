"""Langfuse scores (`POST /api/public/scores`) as `rewards` rows.

SDK v5 posts a JSON list of scores (older SDKs one object). A trace score maps to the
trajectory of its trace (`trajectory_id = traceId`, the id `assemble` gives a trace's
run); numeric and boolean values become `value`, categorical and text values keep
`value` null with the label in `metadata` (never a made-up number). Scores that name
no trace (session or dataset-run scores) belong to no trajectory and are rejected
with a reason, as Langfuse's own 207 answer does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from ingest.redact import RedactionConfig, redact_text
from store.schema import PARTITION_COLUMN, REWARDS, WRITTEN_AT


@dataclass
class ScoreBatch:
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=REWARDS.schema)


def _timestamp(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            pass
    return datetime.now(UTC)


def score_to_reward(score: Any, redaction: RedactionConfig | None = None) -> dict[str, Any] | str:
    """One reward row, or a reason string when the score cannot be stored."""
    if not isinstance(score, dict):
        return f"score must be an object, got {type(score).__name__}"
    trace_id = score.get("traceId") or score.get("trace_id")
    name = score.get("name")
    if not trace_id:
        return f"score `{name}` has no traceId: trajlake stores scores of traces (trajectories) only"
    if not isinstance(name, str) or not name:
        return f"score on trace `{trace_id}` has no name"
    value = score.get("value")
    number: float | None
    label = None
    if isinstance(value, bool | int | float):
        number = float(value)
        if not math.isfinite(number):  # JSON `NaN`/`Infinity` would poison every mean over the reward
            return f"score `{name}` on trace `{trace_id}` has value {value!r}; scores must be finite numbers"
    else:
        number, label = None, None if value is None else str(value)
    comment = score.get("comment")
    if isinstance(comment, str):
        comment = redact_text(comment, redaction)
    at = _timestamp(score.get("timestamp"))
    source = str(score.get("source") or "API").upper()
    metadata = {
        "id": score.get("id"),
        "observation_id": score.get("observationId"),
        "data_type": score.get("dataType"),
        "label": label,
        "environment": score.get("environment"),
        "metadata": score.get("metadata"),
    }
    return {
        "trajectory_id": str(trace_id),
        "name": name,
        "scorer": f"langfuse:{source.lower()}",
        "value": number,
        "explanation": comment if comment is None else str(comment),
        "group_id": None,
        "scored_at": at,
        "run_id": None,
        "status": "ok",
        "error": None,
        "metadata": json.dumps(metadata, sort_keys=True, default=str),
        WRITTEN_AT: None,
        PARTITION_COLUMN: at.date(),
    }


def scores_to_rewards(body: Any, redaction: RedactionConfig | None = None) -> ScoreBatch:
    """Reward rows for a scores request body (a list, or one score object)."""
    batch = ScoreBatch()
    for index, score in enumerate(body if isinstance(body, list) else [body]):
        row = score_to_reward(score, redaction)
        if isinstance(row, str):
            batch.errors.append(f"[{index}] {row}")
        else:
            batch.rows.append(row)
    return batch
