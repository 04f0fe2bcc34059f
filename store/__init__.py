"""The Parquet trajectory lake: schema, writer, DuckDB catalog, compaction. Imports nothing else of trajlake."""

from store.catalog import connect, refresh, run_read_only, scan
from store.compact import CompactConfig, CompactionResult, compact
from store.conform import conform_batch
from store.errors import (
    CompactionError,
    LakeBusy,
    ReadOnlyViolation,
    SchemaViolation,
    SelectionError,
    StoreError,
)
from store.lake import DEFAULT_LAKE, Lake
from store.rows import new_run_id, runs_row, utc_now
from store.schema import TABLES, TableSpec, empty_table, table_spec
from store.selection import check_selection
from store.writer import WriteResult, write

__all__ = [
    "DEFAULT_LAKE",
    "TABLES",
    "CompactConfig",
    "CompactionError",
    "CompactionResult",
    "Lake",
    "LakeBusy",
    "ReadOnlyViolation",
    "SchemaViolation",
    "SelectionError",
    "StoreError",
    "TableSpec",
    "WriteResult",
    "check_selection",
    "compact",
    "conform_batch",
    "connect",
    "empty_table",
    "new_run_id",
    "refresh",
    "run_read_only",
    "runs_row",
    "scan",
    "table_spec",
    "utc_now",
    "write",
]
