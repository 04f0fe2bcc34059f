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

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from store.delta_log import earliest_version
from store.errors import DataErased, ReadOnlyViolation, SelectionError
from store.lake import Lake

# `run_read_only` and `check_read_only` lived here; `store.readonly` holds them now.
from store.readonly import check_read_only as check_read_only
from store.readonly import run_read_only as run_read_only
from store.schema import PARTITION_COLUMN, TABLES, WRITTEN_AT, TableSpec, table_spec
from store.vocabulary import PRODUCTION_SOURCES, one_of

if TYPE_CHECKING:  # the dataset module imports pandas where installed: loaded by the views that use it
    import pyarrow.dataset as ds

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class TableVersion:
    """One table at one version: what a query over it reads, and how to name it for lineage."""

    table: str
    version: int | None  # None: nothing was ever committed to the table
    timestamp: datetime | None  # when that version was committed
    files: tuple[str, ...] = ()

    def lineage(self) -> dict[str, Any]:
        return {"version": self.version, "timestamp": self.timestamp.isoformat() if self.timestamp else None}


Snapshot = dict[str, TableVersion]


def table_version(lake: Lake, table: str, version: int | None = None) -> TableVersion:
    """The files of `table` at `version` (the newest when None)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = DeltaTable(lake.table_uri(table), version=version, storage_options=lake.delta_options)
    except TableNotFoundError:
        if version is not None:
            earliest = earliest_version(lake, table)
            if earliest is not None and version < earliest:
                raise DataErased(table, version, earliest) from None
            raise
        return TableVersion(table, None, None)
    current = delta.version()
    stamp = lake.commit_info(table, current).get("timestamp")
    when = datetime.fromtimestamp(stamp / 1000, UTC) if stamp is not None else None
    return TableVersion(table, current, when, tuple(delta.file_uris()))


def snapshot(lake: Lake | str | os.PathLike[str], versions: Mapping[str, int] | None = None) -> Snapshot:
    """Every table's current version (or the `versions` given, for time travel)."""
    lake = Lake.of(lake)
    versions = versions or {}
    return {name: table_version(lake, name, versions.get(name)) for name in TABLES}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


DERIVED_VIEWS = {
    "messages": f"""
        SELECT trajectory_id, source, model, scenario_id, group_id, {PARTITION_COLUMN},
               position - 1 AS position,
               msg.role AS role, msg.content AS content, msg.name AS name,
               msg.tool_call_id AS tool_call_id, msg.tool_calls AS tool_calls,
               msg.is_error AS is_error
        FROM (
            SELECT trajectory_id, source, model, scenario_id, group_id, {PARTITION_COLUMN},
                   unnest(messages) AS msg, generate_subscripts(messages, 1) AS position
            FROM trajectories
        )
    """,
    # Per (trajectory_id, name) the newest successful reward. Most pairs have one row (one
    # scorer): only pairs that repeat (found on a hash) go through the window.
    "latest_rewards": """
        WITH r AS NOT MATERIALIZED (
            SELECT * FROM rewards WHERE status IS DISTINCT FROM 'failed' AND value IS NOT NULL
        ),
        d AS MATERIALIZED (SELECT hash(trajectory_id, name) AS __h FROM r GROUP BY 1 HAVING count(*) > 1)
        SELECT * FROM r ANTI JOIN d ON hash(trajectory_id, name) = d.__h
        UNION ALL
        (SELECT * FROM r SEMI JOIN d ON hash(trajectory_id, name) = d.__h
         QUALIFY row_number() OVER (PARTITION BY trajectory_id, name ORDER BY scored_at DESC, _written_at DESC) = 1)
    """,
    "groups": """
        SELECT t.group_id, any_value(t.scenario_id) AS scenario_id, r.name,
               count(*) AS size, avg(r.value) AS mean, coalesce(stddev_pop(r.value), 0) AS std,
               min(r.value) AS min, max(r.value) AS max, min(r.value) = max(r.value) AS all_equal
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE t.group_id IS NOT NULL
        GROUP BY t.group_id, r.name
    """,
    "policy_performance": """
        SELECT coalesce(t.policy, t.model) AS policy, a.name AS adapter, a.version AS adapter_version,
               r.name, date_trunc('day', t.started_at) AS day, count(*) AS trajectories,
               avg(r.value) AS mean, min(t.started_at) AS first_seen, max(t.started_at) AS last_seen
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
             LEFT JOIN adapters a ON coalesce(t.policy, t.model) = a.name || '-v' || CAST(a.version AS VARCHAR)
        WHERE {production} AND coalesce(t.policy, t.model) IS NOT NULL
        GROUP BY ALL
    """.replace("{production}", one_of("t.source", PRODUCTION_SOURCES, table="trajectories")),
}

GROUP_STATS_MACRO = """
    CREATE OR REPLACE MACRO group_stats(reward_name) AS TABLE
    SELECT * FROM groups WHERE name = reward_name
"""


def scan_type(arrow_type: pa.DataType) -> pa.DataType:
    """`arrow_type` with every text type, nested ones too, as `string_view`: how a view reads it.

    Files that delta-rs's MERGE wrote carry `string_view` columns, the others `string`, and
    pyarrow's dataset scan casts each file's columns to the dataset's types but cannot compare
    a `string` filter value with a `string_view` column (`equal(string, string_view)` has no
    kernel). Declared as `string_view`, every file reads (a `string` column casts to it), and
    DuckDB, seeing view columns, evaluates its text filters itself rather than pushing them
    into the scan; filters on numbers and times, where every file agrees, are pushed down.

    >>> scan_type(pa.list_(pa.struct([("role", pa.string()), ("n", pa.int64())])))
    ListType(list<item: struct<role: string_view, n: int64>>)
    """
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.string_view()
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(scan_type(arrow_type.value_type)))
    if pa.types.is_struct(arrow_type):
        return pa.struct([field.with_type(scan_type(field.type)) for field in arrow_type.fields])
    return arrow_type


def scan_schema(spec: TableSpec) -> pa.Schema:
    """A table's schema as its view scans it: text as `string_view` (`scan_type`), except the
    partition column, which comes from the hive path and never from a file."""
    return pa.schema(
        [
            field if field.name == PARTITION_COLUMN else field.with_type(scan_type(field.type))
            for field in spec.schema
        ]
    )


def table_dataset(lake: Lake, spec: TableSpec, files: tuple[str, ...]) -> ds.Dataset:
    """One table version as an Arrow dataset in the schema's columns: what its view reads.

    A plain pyarrow dataset, scanned by Arrow's C++ reader and handed to DuckDB through the
    Arrow C stream interface: no Python runs on pyarrow's or DuckDB's threads while a query
    reads it, so a query that stops early (LIMIT) or fails leaves no thread inside Python.
    The files are read (a remote lake's through `Lake.arrow_fs`) when a query scans them,
    not listed or opened here; the partition column comes from the hive path
    (`dt=2026-01-31/part-0.parquet`), a column a file lacks reads as null, and text reads as
    `string_view` (`scan_type`).
    """
    import pyarrow.dataset as ds

    schema = scan_schema(spec)
    if not files:
        return ds.dataset(schema.empty_table())
    filesystem, base = lake.arrow_fs, lake.fs_path(spec.name)
    paths = [f.removeprefix("file://") if lake.is_local else f.split("://", 1)[-1] for f in files]
    hive = (
        ds.partitioning(pa.schema([spec.schema.field(PARTITION_COLUMN)]), flavor="hive")
        if spec.partitioned
        else None
    )
    fmt = ds.ParquetFileFormat()
    fragments = [
        fmt.make_fragment(
            path, filesystem, partition_expression=hive.parse(path.removeprefix(base)) if hive else None
        )
        for path in paths
    ]
    return ds.FileSystemDataset(fragments, schema, fmt, filesystem)


def parquet_view_sql(spec: TableSpec, files: tuple[str, ...], con: duckdb.DuckDBPyConnection) -> str:
    """One table's files read by DuckDB's own Parquet reader, in the schema's columns, order
    and types (a column no file has yet reads as null): the view of a connection whose file
    access is on anyway (`open_connection(local_files=True)`, inside the write sandbox).

    DuckDB reads every text column as VARCHAR whether a file wrote `string` or `string_view`,
    pushes every filter into the scan (row-group statistics, text included), and runs no
    Python and no pyarrow thread while it reads.
    """
    # `pa.nulls`, not `empty_table()`: building arrays from Python objects imports pandas (0.2 s)
    empty = con.from_arrow(
        pa.Table.from_arrays([pa.nulls(0, f.type) for f in spec.schema], schema=spec.schema)
    )
    types = list(zip(empty.columns, map(str, empty.types), strict=True))
    typed = "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {_quote(c)}" for c, t in types) + " WHERE false"
    if not files:
        return typed
    cols = ", ".join(f"CAST({_quote(c)} AS {t}) AS {_quote(c)}" for c, t in types)
    urls = ", ".join(_literal(path) for path in files)
    # The typed empty row set keeps columns no file has yet (additive evolution) in the schema's types.
    return (
        f"SELECT {cols} FROM ({typed} UNION ALL BY NAME SELECT * FROM read_parquet([{urls}], "
        f"hive_partitioning={str(spec.partitioned).lower()}, union_by_name=true))"
    )


def connect(
    lake: Lake | str | os.PathLike[str],
    *,
    read_only: bool = False,
    snapshot: Snapshot | None = None,
    memory_limit: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the lake's views, that cannot open any file.

    The views read a snapshot: every table's version when `connect` (or `refresh`) ran,
    or the `snapshot` given (`store.snapshot(lake, versions)` for time travel). Data
    committed later is seen after `refresh(con, lake)` or on a new connection;
    connections are cheap, so take a new one per unit of work.

    No SQL on the connection reads or writes a file, URL or extension: the tables come in
    as Arrow datasets and DuckDB's external access is off (module docstring), so user SQL
    (selections, `--sql-reward`, scenario queries) can run on any connection.
    `read_only=True` (a connection that serves user SQL) also keeps DuckDB's own temporary
    files off (a query past the memory fails instead of spilling), loads no extension, and
    locks the settings so none of this can be changed back. `memory_limit` (`"4GB"`)
    bounds it. `trajlake sql`'s reading of local files is `store.user_sql`'s business.
    """
    return open_connection(
        Lake.of(lake), read_only=read_only, pinned=snapshot, memory_limit=memory_limit, local_files=False
    )


def open_connection(
    lake: Lake,
    *,
    read_only: bool,
    pinned: Snapshot | None,
    memory_limit: str | None,
    local_files: bool,
) -> duckdb.DuckDBPyConnection:
    """`connect`'s body. `local_files=True` leaves DuckDB's file access on (it reads local
    files and could write them): only for a thread the kernel forbids to write, as
    `store.user_sql` opens it."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    if local_files and lake.is_local:
        # File access is on and the kernel forbids writes: DuckDB reads the files itself, so
        # no pyarrow pool thread is started inside the sandbox (one would keep its
        # restriction, and the process's pyarrow could then neither write nor connect).
        current = pinned or snapshot(lake)
        for spec in TABLES.values():
            files = current[spec.name].files if spec.name in current else ()
            paths = tuple(f.removeprefix("file://") for f in files)
            con.execute(f"CREATE OR REPLACE VIEW {_quote(spec.name)} AS {parquet_view_sql(spec, paths, con)}")
    else:
        refresh(con, lake, pinned)
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
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
    con: duckdb.DuckDBPyConnection, lake: Lake | str | os.PathLike[str], pinned: Snapshot | None = None
) -> Snapshot:
    """Point the table views of a `connect`ed connection at a snapshot (the lake's newest by default)."""
    lake = Lake.of(lake)
    current = pinned or snapshot(lake)
    for spec in TABLES.values():
        files = current[spec.name].files if spec.name in current else ()
        con.register(spec.name, table_dataset(lake, spec, files))
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


@dataclass(frozen=True)
class TableStats:
    """Per-table facts for `trajlake tables`, from the table's Delta log."""

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
