"""The report's time window: SQL keeping a timestamp column in [since, until)."""

from __future__ import annotations

from typing import Any


def time_window(since: str | None, until: str | None, column: str = "t.started_at") -> tuple[str, list[Any]]:
    """SQL (`AND ...`) that keeps `column` in [since, until), and its parameters."""
    sql, params = "", []
    if since:
        sql += f" AND {column} >= CAST(? AS TIMESTAMPTZ)"
        params.append(since)
    if until:
        sql += f" AND {column} < CAST(? AS TIMESTAMPTZ)"
        params.append(until)
    return sql, params
