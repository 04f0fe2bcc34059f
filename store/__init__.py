"""The Parquet trajectory lake: schema, writer, DuckDB catalog, compaction. Imports nothing else of trajlake."""

from store.catalog import connect, refresh, run_read_only, scan
from store.compact import CompactConfig, CompactionResult, compact
from store.errors import (
    CompactionError,
    LakeBusy,
    ReadOnlyViolation,
    SchemaViolation,
    SelectionError,
    StoreError,
)
from store.lake import DEFAULT_LAKE, Lake
from store.schema import TABLES, TableSpec, empty_table, table_spec
from store.selection import check_selection
from store.writer import WriteResult, conform_batch, new_run_id, utc_now, write

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
    "scan",
    "table_spec",
    "utc_now",
    "write",
]
