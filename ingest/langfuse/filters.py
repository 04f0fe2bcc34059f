"""What a pull covers: its time window and how the filters reach the Langfuse API (pure functions).

The API filters observations by time, environment, trace name, user and session; trace
tags can only be checked on the trace's own attributes, so `matches_trace_filters`
applies them after the fact to what the lake holds.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from ingest.langfuse.config import PullFilters
from ingest.langfuse.watermark import PullState


def plan_window(
    state: PullState, filters: PullFilters, overlap: timedelta, now: datetime
) -> tuple[datetime | None, datetime]:
    """The `[from, to)` start-time window of a fresh run.

    >>> from datetime import UTC
    >>> t = datetime(2026, 1, 1, 12, tzinfo=UTC)
    >>> plan_window(PullState("s", watermark=t), PullFilters(), timedelta(hours=1), t + timedelta(hours=5))
    (datetime.datetime(2026, 1, 1, 11, 0, tzinfo=datetime.timezone.utc), datetime.datetime(2026, 1, 1, 17, 0, tzinfo=datetime.timezone.utc))
    """
    to = min(now, filters.until) if filters.until else now
    start = state.watermark - overlap if state.watermark else None
    if filters.since and (start is None or filters.since > start):
        start = filters.since
    return start, to


def observation_filter(filters: PullFilters, start: datetime | None, end: datetime | None) -> str | None:
    """The v2 `filter` JSON for `filters`, or None when plain query parameters suffice.

    The API lets `filter` take precedence over the query-parameter filters, so when it
    is needed it carries the time window too.
    """
    conditions: list[dict[str, Any]] = []
    if filters.environments:
        conditions.append(
            {
                "type": "stringOptions",
                "column": "environment",
                "operator": "any of",
                "value": list(filters.environments),
            }
        )
    if filters.trace_name:
        conditions.append(
            {"type": "string", "column": "traceName", "operator": "=", "value": filters.trace_name}
        )
    if filters.tags:
        conditions.append(
            {"type": "arrayOptions", "column": "traceTags", "operator": "any of", "value": list(filters.tags)}
        )
    if filters.user_id:
        conditions.append({"type": "string", "column": "userId", "operator": "=", "value": filters.user_id})
    if filters.session_id:
        conditions.append(
            {"type": "string", "column": "sessionId", "operator": "=", "value": filters.session_id}
        )
    if not conditions:
        return None
    if start is not None:
        conditions.append({"type": "datetime", "column": "startTime", "operator": ">=", "value": iso(start)})
    if end is not None:
        conditions.append({"type": "datetime", "column": "startTime", "operator": "<", "value": iso(end)})
    return json.dumps(conditions)


def matches_trace_filters(attributes_json: list[str], filters: PullFilters) -> bool:
    """Whether a trace's spans (attribute JSON texts) satisfy the trace-level filters."""
    names: set[str] = set()
    tags: set[str] = set()
    users: set[str] = set()
    sessions: set[str] = set()
    for text in attributes_json:
        attrs = json.loads(text or "{}")
        if attrs.get("langfuse.trace.name"):
            names.add(attrs["langfuse.trace.name"])
        tags.update(attrs.get("langfuse.trace.tags") or [])
        if attrs.get("user.id"):
            users.add(attrs["user.id"])
        if attrs.get("session.id"):
            sessions.add(attrs["session.id"])
    return (
        (not filters.trace_name or filters.trace_name in names)
        and (not filters.tags or bool(tags & set(filters.tags)))
        and (not filters.user_id or filters.user_id in users)
        and (not filters.session_id or filters.session_id in sessions)
    )


def iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
