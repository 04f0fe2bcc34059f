"""The Parquet trajectory lake: schema, writer, DuckDB catalog. Imports nothing else of trajlake."""

from store.catalog import connect, run_read_only, scan
from store.errors import ReadOnlyViolation, SchemaViolation, StoreError
from store.lake import DEFAULT_LAKE, Lake
from store.schema import TABLES, TableSpec, empty_table, table_spec
from store.writer import WriteResult, conform_batch, utc_now, write

__all__ = [
    "DEFAULT_LAKE",
    "TABLES",
    "Lake",
    "ReadOnlyViolation",
    "SchemaViolation",
    "StoreError",
    "TableSpec",
    "WriteResult",
    "conform_batch",
    "connect",
    "empty_table",
    "run_read_only",
    "scan",
    "table_spec",
    "utc_now",
    "write",
]
