"""Per-table facts for `trajlake tables`, from each Delta table's log: version, rows, files, bytes, newest data."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from store.lake import Lake
from store.schema import TABLES, WRITTEN_AT


@dataclass(frozen=True)
class TableStats:
    table: str
    version: int | None  # None: nothing committed yet
    rows: int
    files: int
    bytes: int
    newest: datetime | None  # newest `_written_at`: when data last arrived


def table_stats(lake: Lake | str | os.PathLike[str]) -> list[TableStats]:
    """Stats for every table of the lake, empty tables included (read from the logs, no data scanned)."""
    from deltalake import DeltaTable

    lake = Lake.of(lake)
    out = []
    for name in TABLES:
        if not lake.has_table(name):
            out.append(TableStats(name, None, 0, 0, 0, None))
            continue
        delta = DeltaTable(lake.table_uri(name), storage_options=lake.delta_options)
        actions = pa.table(delta.get_add_actions(flatten=True))
        stamps = f"max.{WRITTEN_AT}"
        newest = pc.max(actions.column(stamps)).as_py() if stamps in actions.column_names else None
        out.append(
            TableStats(
                name,
                delta.version(),
                int(pc.sum(actions.column("num_records")).as_py() or 0),
                actions.num_rows,
                int(pc.sum(actions.column("size_bytes")).as_py() or 0),
                newest,
            )
        )
    return out
