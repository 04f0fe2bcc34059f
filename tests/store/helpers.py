"""Tiny builders for store tests (rows inline, as datatrove's `get_doc`)."""

from __future__ import annotations

import glob
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from store.catalog.connection import connect
from store.lake import Lake
from store.metrics import row_metrics

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def make_traj(i: int, *, model: str = "m1", day: int = 0, **extra: Any) -> dict[str, Any]:
    """A minimal valid trajectory row with id `t<i>`."""
    row: dict[str, Any] = {
        "trajectory_id": f"t{i}",
        "source": "otel",
        "model": model,
        "started_at": T0 + timedelta(days=day, seconds=i),
        "messages": [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": "hi"}],
    }
    row.update(extra)
    return row


def visible_files(lake: Lake, table: str) -> list[str]:
    """What a plain `**/*.parquet` glob sees."""
    return sorted(glob.glob(os.path.join(lake.root, table, "**", "*.parquet"), recursive=True))


def all_files(lake: Lake) -> list[str]:
    """Every file under the lake, hidden temporaries included."""
    return sorted(
        os.path.join(d, f) for d, _, files in os.walk(lake.root) for f in files if "_compaction" not in d
    )


def count(lake: Lake | str, sql: str) -> Any:
    con = connect(lake)
    try:
        return con.execute(sql).fetchall()[0][0]
    finally:
        con.close()


def run_metrics(lake: Lake | str | os.PathLike[str], run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(step, stage, metrics) of a run's `runs` rows by step, the metrics as trajlake reads them
    back (its `scalars` and `tags`: `store.metrics.row_metrics`)."""
    with connect(lake) as con:
        rows = con.execute(
            "SELECT step, stage, scalars, tags FROM runs WHERE run_id = ? ORDER BY step", [run_id]
        ).fetchall()
    return [(step, stage, row_metrics(scalars, tags)) for step, stage, scalars, tags in rows]
