"""How a scoring run writes: reward rows buffered and committed in batches, a progress bar,
and the run's summary built from the rows it wrote."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from judging.summary import ScoreSummary, count_failures, value_stats
from store.lake import Lake
from store.writer import write


@dataclass
class RewardWriter:
    """Buffers reward rows and commits them in batches; keeps a light copy for the summary."""

    lake: Lake
    flush_every: int
    flush_interval_s: float
    flush_rows: int = 50_000
    buffer: list[dict[str, Any]] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)
    rows_written: int = 0
    _groups_pending: int = 0
    _last_flush: float = field(default_factory=time.monotonic)

    def add(self, rows: list[dict[str, Any]], groups: int = 1, *, auto_flush: bool = True) -> bool:
        """Buffer rows; commit when a threshold is reached (or report that one is, with `auto_flush=False`)."""
        self.buffer.extend(rows)
        self.written.extend(
            {k: r[k] for k in ("name", "group_id", "value", "status", "error", "trajectory_id")} for r in rows
        )
        self._groups_pending += groups
        due = (
            self._groups_pending >= self.flush_every
            or len(self.buffer) >= self.flush_rows
            or time.monotonic() - self._last_flush >= self.flush_interval_s
        )
        if due and auto_flush:
            self.flush()
        return due

    def flush(self) -> None:
        if self.buffer:
            write(self.lake, "rewards", self.buffer)
            self.rows_written += len(self.buffer)
        self.buffer = []
        self._groups_pending = 0
        self._last_flush = time.monotonic()


def reward_row(
    trajectory_id: str,
    name: str,
    scorer: str,
    *,
    value: float | None,
    status: str,
    group_id: str | None,
    run_id: str,
    scored_at: Any,
    error: str | None = None,
    explanation: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One `rewards` row."""
    return {
        "trajectory_id": trajectory_id,
        "name": name,
        "scorer": scorer,
        "value": value,
        "explanation": explanation,
        "group_id": group_id,
        "scored_at": scored_at,
        "run_id": run_id,
        "status": status,
        "error": error,
        "metadata": json.dumps(metadata or {}, sort_keys=True),
    }


class ProgressBar:
    """A rich progress bar on stderr, or nothing when progress is off."""

    def __init__(self, enabled: bool, description: str, total: int) -> None:
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        if enabled:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.task = self.progress.add_task(description, total=total)

    def __enter__(self) -> ProgressBar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, n: int = 1) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, n)


def finish_summary(summary: ScoreSummary, writer: RewardWriter) -> ScoreSummary:
    summary.rows_written = writer.rows_written
    summary.failures = count_failures(writer.written)
    summary.values = value_stats(writer.written)
    by_traj_failed = {r["trajectory_id"] for r in writer.written if r["status"] == "failed"}
    by_traj = {r["trajectory_id"] for r in writer.written}
    summary.trajectories_failed = len(by_traj_failed)
    summary.trajectories_scored = len(by_traj - by_traj_failed)
    groups: dict[str, bool] = {}
    for r in writer.written:
        gid = r["group_id"] or r["trajectory_id"]
        groups[gid] = groups.get(gid, True) and r["status"] == "ok"
    if summary.kind != "ruler":
        summary.groups_scored = sum(groups.values())
        summary.groups_failed = len(groups) - summary.groups_scored
    return summary
