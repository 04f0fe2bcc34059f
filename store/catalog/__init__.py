"""SQL over the lake: a DuckDB connection with one view per table over a snapshot of its Delta table.

Every table is a Delta table, so its current files hold exactly one row per key: a view
is an Arrow dataset over the file list of one table version (hive partitions, the
schema's columns, so files older than a new column read it as null), without
deduplication. A snapshot pins a version of every table, so a query sees one consistent
state of the lake while writers commit and `compact` rewrites files (replaced files stay
on disk until a vacuum, after the retention period). Lineage pins the versions a training
run read; `connect(lake, snapshot=...)` reads them again.

Why Arrow datasets and not DuckDB's own Parquet reader: a connection whose SQL could
open a file could write one. DuckDB has one gate for every file, URL and extension it
opens (`OpenerFileSystem`, checked against `enable_external_access` and
`allowed_directories`), and it does not tell reading from writing: a folder it may read
it may also `COPY ... TO`. So DuckDB gets no file at all: pyarrow reads the tables and
hands DuckDB the rows, and every connection has `enable_external_access = false` with
nothing allowed. Whatever a statement is, wherever the grammar lets it nest, it cannot
open, create or replace a file. Point lookups of whole rows cost more this way
(pyarrow reads a row group's columns before DuckDB filters them; README: Security).
The one exception is `trajlake sql`'s local-files connection (`open_connection(
local_files=True)`), whose file access is on anyway and whose thread the kernel forbids to
write: there DuckDB reads a local lake's files itself (`parquet_view_sql`), with every
filter pushed into the scan.

Derived views:

- `messages`: one row per message, with `trajectory_id` and its 0-based `position`;
- `latest_rewards`: per (`trajectory_id`, `name`) the newest successful reward, any scorer;
- `groups`: per (`group_id`, reward `name`): size, mean, std, min, max, `all_equal`;
  the table macro `group_stats(reward_name)` gives the same for one chosen reward;
- `policy_performance`: production feedback per policy over time: per (`policy`,
  reward `name`, `day`) of production trajectories (otel, langfuse, import), their count
  and mean reward; a policy that is a published adapter's served name
  (`served_adapter_name`: `<name>-v<version>`, what vLLM and `trajlake serve-sampler`
  report for a LoRA) is attributed to that `adapters` row (`adapter`, `adapter_version`).

Polars users get the same tables from `scan` (`polars.scan_delta`). Selections (`check_selection`)
are user SQL over these views that picks rows by id; `table_stats` reads each table's log.
"""

from __future__ import annotations

# `run_read_only` and `check_read_only` lived here; `store.readonly` holds them now.
from store.catalog.connection import check_selection, connect, open_connection, refresh, scan
from store.catalog.derived_views import DERIVED_VIEWS, GROUP_STATS_MACRO
from store.catalog.table_views import parquet_view_sql, scan_schema, scan_type, table_dataset
from store.catalog.versions import Snapshot, TableStats, TableVersion, snapshot, table_stats, table_version
from store.readonly import check_read_only as check_read_only
from store.readonly import run_read_only as run_read_only

__all__ = [
    "DERIVED_VIEWS",
    "GROUP_STATS_MACRO",
    "Snapshot",
    "TableStats",
    "TableVersion",
    "check_read_only",
    "check_selection",
    "connect",
    "open_connection",
    "parquet_view_sql",
    "refresh",
    "run_read_only",
    "scan",
    "scan_schema",
    "scan_type",
    "snapshot",
    "table_dataset",
    "table_stats",
    "table_version",
]
