"""DuckDB connections over a snapshot's views, polars scans, and selection checks."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import TYPE_CHECKING

import duckdb

from store.catalog.derived_views import DERIVED_VIEWS, GROUP_STATS_MACRO
from store.catalog.table_views import _literal, _quote, parquet_view_sql, table_dataset
from store.catalog.versions import Snapshot, snapshot
from store.errors import ReadOnlyViolation, SelectionError
from store.lake import Lake
from store.readonly import check_read_only
from store.schema import TABLES, table_spec

if TYPE_CHECKING:
    import polars as pl


def connect(
    lake: Lake | str | os.PathLike[str],
    *,
    read_only: bool = False,
    snapshot: Snapshot | None = None,
    memory_limit: str | None = None,
    views: Collection[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the lake's views, that cannot open any file.

    The views read a snapshot: every table's version when `connect` (or `refresh`) ran,
    or the `snapshot` given (`store.catalog.versions.snapshot(lake, versions)` for time travel). Data
    committed later is seen after `refresh(con, lake)` or on a new connection;
    connections are cheap, so take a new one per unit of work.

    No SQL on the connection reads or writes a file, URL or extension: the tables come in
    as Arrow datasets and DuckDB's external access is off (module docstring), so user SQL
    (selections, `--sql-reward`, scenario queries) can run on any connection.
    `read_only=True` (a connection that serves user SQL) also keeps DuckDB's own temporary
    files off (a query past the memory fails instead of spilling), loads no extension, and
    locks the settings so none of this can be changed back. `memory_limit` (`"4GB"`)
    bounds it. `views` makes only those views (a closed set: `store.catalog.query_views`);
    `trajlake sql`'s reading of local files is `store.user_sql`'s business.
    """
    return open_connection(
        Lake.of(lake),
        read_only=read_only,
        pinned=snapshot,
        memory_limit=memory_limit,
        local_files=False,
        views=views,
    )


def open_connection(
    lake: Lake,
    *,
    read_only: bool,
    pinned: Snapshot | None,
    memory_limit: str | None,
    local_files: bool,
    views: Collection[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """`connect`'s body. `local_files=True` leaves DuckDB's file access on (it reads local
    files and could write them): only for a thread the kernel forbids to write, as
    `store.user_sql` opens it. `views` (with what they read: `store.catalog.query_views`)
    are the only views made (the group macro with `groups`); None: every view."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    tables = [name for name in TABLES if views is None or name in views]
    if local_files and lake.is_local:
        # File access is on and the kernel forbids writes: DuckDB reads the files itself, so
        # no pyarrow pool thread is started inside the sandbox (one would keep its
        # restriction, and the process's pyarrow could then neither write nor connect).
        current = snapshot(lake, tables=tables) if pinned is None else pinned
        for name in tables:
            files = current[name].files if name in current else ()
            paths = tuple(f.removeprefix("file://") for f in files)
            con.execute(
                f"CREATE OR REPLACE VIEW {_quote(name)} AS {parquet_view_sql(TABLES[name], paths, con)}"
            )
    else:
        refresh(con, lake, pinned, tables=tables)
    for name, sql in DERIVED_VIEWS.items():
        if views is None or name in views:
            con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
    if views is None or "groups" in views:  # the macro reads `groups`
        con.execute(GROUP_STATS_MACRO)
    if read_only or local_files:
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET temp_directory = ''")
    if memory_limit:
        con.execute(f"SET memory_limit = {_literal(memory_limit)}")
    if not local_files:
        # After the views: from here on no path opens, not even one under the lake
        # (`allowed_directories` stays empty; what it allows it allows for writing too).
        con.execute("SET enable_external_access = false")
    if read_only or local_files:
        con.execute("SET lock_configuration = true")
    return con


def refresh(
    con: duckdb.DuckDBPyConnection,
    lake: Lake | str | os.PathLike[str],
    pinned: Snapshot | None = None,
    *,
    tables: Collection[str] | None = None,
) -> Snapshot:
    """Point the table views of a `connect`ed connection at a snapshot (the lake's newest by
    default): every table's, or those of `tables`."""
    lake = Lake.of(lake)
    chosen = [name for name in TABLES if tables is None or name in tables]
    current = snapshot(lake, tables=chosen) if pinned is None else pinned
    for name in chosen:
        files = current[name].files if name in current else ()
        con.register(name, table_dataset(lake, TABLES[name], files))
    return current


def scan(lake: Lake | str | os.PathLike[str], table: str, version: int | None = None) -> pl.LazyFrame:
    """A polars LazyFrame of a table (one row per key), at `version` or the newest."""
    import polars as pl  # for polars users only: SQL over the lake (`trajlake sql`) does without it

    lake = Lake.of(lake)
    spec = table_spec(table)
    if not lake.has_table(table):
        return pl.DataFrame(spec.schema.empty_table()).lazy()
    frame = pl.scan_delta(lake.table_uri(table), version=version, storage_options=lake.delta_options or None)
    return frame.select(spec.schema.names)


def check_selection(con: duckdb.DuckDBPyConnection, sql: str, column: str) -> tuple[str, list[str]]:
    """The query without a trailing `;`, and its columns, once it is known to only read,
    to run on this lake and to return `column`. Raises `SelectionError` with a reason code.

    Scenarios, training sets and replays are chosen with any read-only query over the views
    that returns an id column (`SELECT trajectory_id FROM trajectories WHERE ...`). Stages
    wrap the query, never edit it, so what `trajlake sql` previews is what a stage uses.
    """
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise SelectionError(
            f"the selection SQL is empty; pass a query returning `{column}`", sql=sql, reason="empty_sql"
        )
    try:
        check_read_only(con, text)
        columns = [d[0] for d in con.execute(f"SELECT * FROM ({text}) LIMIT 0").description]
    except ReadOnlyViolation as exc:
        raise SelectionError(
            f"the selection SQL must only read: {exc}", sql=sql, reason="not_read_only"
        ) from exc
    except duckdb.Error as exc:
        raise SelectionError(
            f"the selection SQL failed: {exc}\n  query: `{text}`\n  try it first with `trajlake sql`",
            sql=sql,
            reason="bad_sql",
        ) from exc
    if column not in columns:
        raise SelectionError(
            f"the selection SQL must return a `{column}` column; it returned: {', '.join(columns) or 'nothing'}",
            sql=sql,
            reason="missing_column",
        )
    return text, columns
