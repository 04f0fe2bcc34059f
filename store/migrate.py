"""`trajlake migrate`: a lake written by the Parquet-files release becomes Delta tables, no row lost or doubled.

The previous release wrote immutable Parquet files per table (`part-<ns>-<hex>.parquet`,
and `compact-<generation>-<hex>.parquet` from its compaction), where a key could repeat
and the row with the newest `_written_at` was the current one. Migrating a table:

1. reads every old file of the table and keeps the newest row per key (the rows the old
   views showed);
2. commits them to the table's Delta log in one write: the old files stay where they are
   but are not part of the table (no Delta reader sees them);
3. moves the old files to `<lake>/_legacy/<table>/` (and the old compaction bookkeeping
   to `<lake>/_legacy/_compaction/`), where they can be deleted once the lake is checked.

Each step can be repeated: a rerun after a crash re-commits the same rows, which replace
nothing newer (`store.write` keeps the newest `_written_at` per key), then moves what is
left. Stop collectors and other writers while a lake migrates.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from store.catalog import parquet_view_sql
from store.lake import Lake
from store.schema import TABLES, WRITTEN_AT, TableSpec
from store.writer import write

LEGACY_DIR = "_legacy"
# File names of the Parquet-files release; Delta's own files look nothing like them.
LEGACY_FILE = re.compile(r"^(?:part|compact)-\d{20}-[0-9a-f]{16}\.parquet$")
OLD_BOOKKEEPING = ("_compaction",)


@dataclass
class TableMigration:
    table: str
    files: int = 0  # old files moved to `_legacy`
    rows_read: int = 0  # rows in the old files, superseded versions included
    rows: int = 0  # current rows committed (one per key)
    version: int | None = None


def legacy_files(lake: Lake, table: str) -> list[str]:
    """The old release's data files of `table` (fsspec paths)."""
    directory = lake.fs_path(table)
    if not lake.fs.exists(directory):
        return []
    found = lake.fs.find(directory)
    return sorted(p for p in found if LEGACY_FILE.match(p.rsplit("/", 1)[-1]) and "/_delta_log/" not in p)


def current_rows(lake: Lake, spec: TableSpec, files: list[str]) -> tuple[int, Iterator[pa.RecordBatch]]:
    """(rows read, the newest row per key) of the old files, in the table's schema."""
    con = duckdb.connect()
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    urls = tuple(p if lake.is_local else f"{lake.protocol}://{p}" for p in files)
    # The view's SQL: the files in the table's schema and types (`_written_at` had nanoseconds then).
    source = f"({parquet_view_sql(spec, urls, con)})"
    ((total,),) = con.execute(f"SELECT count(*) FROM {source}").fetchall()
    key = ", ".join(f'"{k}"' for k in spec.key)
    reader = con.sql(
        f"SELECT * FROM {source} "
        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {WRITTEN_AT} DESC NULLS LAST) = 1"
    ).to_arrow_reader(50_000)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from reader
        con.close()

    return int(total), batches()


def migrate_table(lake: Lake, table: str) -> TableMigration:
    """Migrate one table (a no-op when it has no old files left)."""
    spec = TABLES[table]
    outcome = TableMigration(table)
    files = legacy_files(lake, table)
    if not files:
        return outcome
    outcome.rows_read, rows = current_rows(lake, spec, files)
    written = write(lake, table, rows)
    outcome.rows, outcome.version = written.rows, written.version
    for path in files:
        relative = path[len(lake.fs_path(table)) + 1 :]
        target = lake.fs_path(LEGACY_DIR, table, relative)
        lake.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        lake.fs.mv(path, target)
    outcome.files = len(files)
    return outcome


def migrate(
    lake: Lake | str | os.PathLike[str], *, on_table: Callable[[str], None] | None = None
) -> list[TableMigration]:
    """Migrate every table of `lake` that still has files of the Parquet-files release."""
    lake = Lake.of(lake)
    out = []
    for table in TABLES:
        if on_table is not None:
            on_table(table)
        out.append(migrate_table(lake, table))
    for name in OLD_BOOKKEEPING:
        old = lake.fs_path(name)
        if lake.fs.exists(old):
            lake.fs.mv(old, lake.fs_path(LEGACY_DIR, name), recursive=True)
    return out
