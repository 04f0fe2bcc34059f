"""Per-table facts for `trajlake tables`: rows after deduplication, files, bytes, newest data."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from store.catalog import connect
from store.lake import Lake
from store.schema import TABLES, WRITTEN_AT


@dataclass(frozen=True)
class TableStats:
    table: str
    rows: int
    files: int
    bytes: int
    newest: datetime | None  # newest `_written_at`: when data last arrived


def table_stats(lake: Lake | str | os.PathLike[str]) -> list[TableStats]:
    """Stats for every table of the lake, empty tables included."""
    lake = Lake.of(lake)
    con = connect(lake)
    out = []
    for name in TABLES:
        files = lake.data_files(name)
        size = sum(lake.fs.size(f) for f in files)
        rows, newest = con.execute(f'SELECT count(*), max({WRITTEN_AT}) FROM "{name}"').fetchall()[0]
        out.append(TableStats(name, rows, len(files), size, newest))
    return out
