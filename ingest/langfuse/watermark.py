"""The puller's progress, kept in the lake's `watermarks` table (key: source, scope).

One row per scope (host + filters). Rows are never updated in place: each checkpoint
appends a row and the view keeps the newest, so the history of a scope's progress is
in the lake too. The row says:

- `watermark`: every observation and score that started before it has been pulled
  (the `to` bound of the last completed window);
- `cursor`: the API cursor to continue from when a pull was interrupted (null when idle);
- `state` (JSON): `phase` (`idle`, `observations`, `scores`), the current window
  (`from`, `to`, ISO), counts so far, and the last completed run's summary.

A pull saves a checkpoint only after the rows it covers are committed, so a resumed
pull re-reads at most the pages since that checkpoint (their rows are rewritten with the
same keys, which the views deduplicate): no gaps, no duplicates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import polars as pl

from store.catalog.connection import scan
from store.lake import Lake
from store.rows import utc_now
from store.writer import write

SOURCE = "langfuse"
Phase = Literal["idle", "observations", "scores"]


@dataclass
class PullState:
    """Where the pull of one scope stands."""

    scope: str
    watermark: datetime | None = None
    cursor: str | None = None
    phase: Phase = "idle"
    window_from: datetime | None = None
    window_to: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    last_run: dict[str, Any] = field(default_factory=dict)

    @property
    def in_progress(self) -> bool:
        return self.phase != "idle"

    def to_row(self) -> dict[str, Any]:
        state = {
            "phase": self.phase,
            "window": {
                "from": self.window_from.isoformat() if self.window_from else None,
                "to": self.window_to.isoformat() if self.window_to else None,
            },
            "counts": self.counts,
            "last_run": self.last_run,
        }
        return {
            "source": SOURCE,
            "scope": self.scope,
            "watermark": self.watermark,
            "cursor": self.cursor,
            "state": json.dumps(state, default=str),
            "updated_at": utc_now(),
        }


def read_state(lake: Lake, scope: str) -> PullState:
    """The newest saved state of `scope`, or a fresh one when it was never pulled."""
    frame = (
        scan(lake, "watermarks").filter((pl.col("source") == SOURCE) & (pl.col("scope") == scope)).collect()
    )
    if frame.is_empty():
        return PullState(scope=scope)
    row = frame.row(0, named=True)
    state = json.loads(row["state"] or "{}")
    window = state.get("window") or {}
    return PullState(
        scope=scope,
        watermark=row["watermark"],
        cursor=row["cursor"],
        phase=state.get("phase", "idle"),
        window_from=_time(window.get("from")),
        window_to=_time(window.get("to")),
        counts=dict(state.get("counts") or {}),
        last_run=dict(state.get("last_run") or {}),
    )


def save_state(lake: Lake, state: PullState) -> None:
    """Append `state` as the scope's newest watermark row (durably)."""
    write(lake, "watermarks", [state.to_row()])


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
