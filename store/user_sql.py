"""`trajlake sql`: a user's SQL over the lake, which may read local files and can write none.

Two ways to run it, and neither can write a file whatever the statement:

- **lake only** (`lake.sql_lake_only`, or where the system has no write sandbox): a
  `store.catalog.connection.connect` connection. DuckDB gets no file at all (the tables arrive as Arrow
  datasets, external access is off with nothing allowed), so reading `/etc/passwd` and
  writing `/tmp/x.csv` fail alike with DuckDB's permission error.
- **local files** (the default on Linux with Landlock): the same tables (read by DuckDB's
  own Parquet reader for a local lake, so no pyarrow pool thread starts inside the
  sandbox and inherits it), but DuckDB's file access stays on so `read_csv('notes.csv')` works like in any DuckDB shell, and the
  connection is opened, used and closed on a thread the kernel forbids to write anything,
  anywhere (`store.sandbox`), nor reach the network (unless the lake itself is on object
  storage). A `COPY ... TO` in a CTE gets `Permission denied` from the kernel; so do
  `ATTACH`, `INSTALL` and `EXPORT DATABASE`, which also fail the statement check first.

In both, the statement check (`store.readonly`) refuses what plainly writes before
anything runs, settings are locked, no extension autoloads, and DuckDB writes no
temporary files (past `memory_limit` a query fails).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import duckdb

from store.catalog.connection import connect, open_connection
from store.catalog.query_views import EVERY_VIEW, views_read
from store.catalog.versions import snapshot
from store.lake import Lake
from store.readonly import run_read_only
from store.sandbox import run_without_writes, write_sandbox_problem


@dataclass(frozen=True)
class QueryResult:
    """The last statement's columns and rows, and how the query ran."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    local_files: bool  # True: local files were readable (the write sandbox held the query)


def local_files_problem(lake: Lake) -> str | None:
    """Why `query_lake` on `lake` reads no local file; None when it may."""
    if lake.sql_lake_only:
        return "`lake.sql_lake_only` is on: SQL may read the lake's tables only"
    problem = write_sandbox_problem()
    if problem:
        return f"local files cannot be read here: {problem}, so SQL reads the lake's tables only"
    return None


def query_lake(
    lake: Lake | str | os.PathLike[str],
    sql: str,
    *,
    timeout_s: float | None = None,
    memory_limit: str | None = None,
) -> QueryResult:
    """Run user SQL over the lake's views; (columns, rows) of the last statement.

    Only the views the query reads are made (`store.catalog.query_views`: `SELECT 1` reads
    no table's log; `SHOW TABLES` sees them all); a query naming a relation that is not
    there runs again with every view, so DuckDB's error suggests the lake's nearest names.
    Raises `ReadOnlyViolation` for a statement that plainly writes (before anything runs),
    `QueryTimeout` past `timeout_s`, and DuckDB's own errors otherwise: a
    `PermissionException` for any file a lake-only query names, an `IOException`
    (`Permission denied`) for any file a local-files query tries to write.
    """
    lake = Lake.of(lake)
    views = views_read(sql)  # the views it names and what they read; all when it looks at the catalog
    try:
        return _query(lake, sql, views, timeout_s=timeout_s, memory_limit=memory_limit)
    except duckdb.CatalogException:
        if views == EVERY_VIEW:
            raise
        return _query(lake, sql, None, timeout_s=timeout_s, memory_limit=memory_limit)


def _query(
    lake: Lake,
    sql: str,
    views: frozenset[str] | None,
    *,
    timeout_s: float | None,
    memory_limit: str | None,
) -> QueryResult:
    """`query_lake` over `views` (None: every view)."""
    if local_files_problem(lake):
        with connect(lake, read_only=True, memory_limit=memory_limit, views=views) as con:
            return QueryResult(*run_read_only(con, sql, timeout_s=timeout_s), local_files=False)
    pinned = snapshot(lake, tables=views)  # read here: delta-rs need not run inside the sandbox

    def sandboxed() -> tuple[list[str], list[tuple[Any, ...]]]:
        con = open_connection(
            lake, read_only=True, pinned=pinned, memory_limit=memory_limit, local_files=True, views=views
        )
        try:
            return run_read_only(con, sql, timeout_s=timeout_s)
        finally:
            con.close()  # DuckDB's worker threads end here, inside the sandbox

    return QueryResult(*run_without_writes(sandboxed, network=not lake.is_local), local_files=True)
