"""SQL over the lake: a DuckDB connection with one view per table over a snapshot of its Delta table.

Every table is a Delta table, so its current files hold exactly one row per key: a view
is DuckDB's own Parquet reader over the file list of one table version (hive partitions,
files unioned by column name so files older than a new column read it as null), as fast
as plain Parquet and without deduplication. A snapshot pins a version of every table, so
a query sees one consistent state of the lake while writers commit and `compact`
rewrites files (replaced files stay on disk until a vacuum, after the retention period).
Lineage pins the versions a training run read; `connect(lake, snapshot=...)` reads them
again.

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
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import QueryTimeout, ReadOnlyViolation, SelectionError
from store.lake import Lake
from store.schema import PARTITION_COLUMN, TABLES, WRITTEN_AT, TableSpec, table_spec
from store.vocabulary import PRODUCTION_SOURCES, one_of

_READ_ONLY_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


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


def table_view_sql(spec: TableSpec, files: tuple[str, ...], con: duckdb.DuckDBPyConnection) -> str:
    """The view of one table version: its files read by DuckDB, in the schema's types and order."""
    empty = con.from_arrow(spec.schema.empty_table())
    types = list(zip(empty.columns, map(str, empty.types), strict=True))
    cols = ", ".join(_quote(c) for c, _ in types)
    typed = "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {_quote(c)}" for c, t in types) + " WHERE false"
    if not files:
        return typed
    urls = ", ".join(_literal(path) for path in files)
    # The typed empty row set keeps columns no file has yet (additive evolution) in the schema's types.
    return (
        f"SELECT {cols} FROM ({typed} UNION ALL BY NAME SELECT * FROM read_parquet([{urls}], "
        f"hive_partitioning={str(spec.partitioned).lower()}, union_by_name=true))"
    )


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
    """.replace("{production}", one_of("t.source", PRODUCTION_SOURCES)),
}

GROUP_STATS_MACRO = """
    CREATE OR REPLACE MACRO group_stats(reward_name) AS TABLE
    SELECT * FROM groups WHERE name = reward_name
"""


def connect(
    lake: Lake | str | os.PathLike[str],
    *,
    read_only: bool = False,
    snapshot: Snapshot | None = None,
    memory_limit: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the lake's views.

    The views read a snapshot: every table's version when `connect` (or `refresh`) ran,
    or the `snapshot` given (`store.snapshot(lake, versions)` for time travel). Data
    committed later is seen after `refresh(con, lake)` or on a new connection;
    connections are cheap, so take a new one per unit of work. `read_only=True` also
    locks the connection against writing files, attaching databases and loading
    extensions (see `run_read_only`). A lake with `sql_lake_only` set gives connections
    that read no file outside its tables (`confine_to_lake`). `memory_limit` (`"4GB"`) bounds
    a connection that serves user SQL: past it a query fails instead of spilling to disk.
    """
    lake = Lake.of(lake)
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    refresh(con, lake, snapshot)
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
    con.execute(GROUP_STATS_MACRO)
    if read_only:
        # Defence in depth behind the statement check in `run_read_only`: no extension can be
        # loaded, and the settings (including these) cannot be changed back.
        con.execute("SET autoload_known_extensions = false")
    if memory_limit:
        con.execute("SET temp_directory = ''")
        con.execute(f"SET memory_limit = {_literal(memory_limit)}")
    if lake.sql_lake_only:
        confine_to_lake(con, lake)
    if read_only:
        con.execute("SET lock_configuration = true")
    return con


def confine_to_lake(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """Let SQL on `con` read the lake's tables and nothing else, for good.

    DuckDB's `enable_external_access = false` stops every file, URL and extension access
    (`read_csv('/etc/passwd')`, `read_blob`, `glob('/home/**')`, `COPY`, `ATTACH`) except
    under `allowed_directories`, here each table's folder (an S3 lake: the table prefixes
    of its own bucket, so the collector's credentials read no other bucket or prefix).
    Once disabled it cannot be enabled again on that connection, and the allowed list
    cannot change. Data registered explicitly (`con.register`) still works.
    """
    dirs = ", ".join(_literal(d) for d in lake.table_dirs())
    con.execute(f"SET allowed_directories = [{dirs}]")
    con.execute("SET enable_external_access = false")


def refresh(
    con: duckdb.DuckDBPyConnection, lake: Lake | str | os.PathLike[str], pinned: Snapshot | None = None
) -> Snapshot:
    """Point the table views of a `connect`ed connection at a snapshot (the lake's newest by default)."""
    lake = Lake.of(lake)
    current = pinned or snapshot(lake)
    for spec in TABLES.values():
        files = current[spec.name].files if spec.name in current else ()
        con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {table_view_sql(spec, files, con)}')
    return current


def explained_statement(query: str) -> str:
    """The statement an `EXPLAIN` statement explains, found with DuckDB's own tokenizer.

    Comments anywhere (`/* c */ EXPLAIN ANALYZE COPY ...`, a `-- c` line first) are tokens
    of their own and skipped; `ANALYZE`/`ANALYSE` and a parenthesised option list
    (`EXPLAIN (ANALYZE, FORMAT json) ...`) are stepped over. Empty when nothing follows.
    """
    every = duckdb.tokenize(query)
    end_of = {
        start: end for (start, _), (end, _) in zip(every, [*every[1:], (len(query), None)], strict=True)
    }
    tokens = [start for start, kind in every if kind != duckdb.token_type.comment]

    def word(i: int) -> str:
        return query[tokens[i] : end_of[tokens[i]]].strip().upper() if i < len(tokens) else ""

    i = 1  # tokens[0] is EXPLAIN
    if word(i) in ("ANALYZE", "ANALYSE"):
        i += 1
    elif word(i) == "(":
        depth = 0
        while i < len(tokens):
            depth += word(i).count("(") - word(i).count(")")
            i += 1
            if depth <= 0:
                break
    return query[tokens[i] :] if i < len(tokens) else ""


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise `ReadOnlyViolation` unless every statement in `sql` only reads.

    Statement types come from DuckDB's parser, never from our reading of the text. An
    `EXPLAIN` must explain a read-only statement too: `EXPLAIN ANALYZE` runs what it
    explains (`EXPLAIN ANALYZE COPY ... TO 'file'` writes the file).
    """
    for statement in con.extract_statements(sql):
        if statement.type not in _READ_ONLY_STATEMENTS:
            raise ReadOnlyViolation(statement.type.name, statement.query)
        if statement.type == duckdb.StatementType.EXPLAIN:
            inner = explained_statement(statement.query)
            if not inner.strip():
                raise ReadOnlyViolation("EXPLAIN", statement.query)
            check_read_only(con, inner)


def run_read_only(
    con: duckdb.DuckDBPyConnection, sql: str, *, timeout_s: float | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run user SQL that may only read; (columns, rows) of the last statement.

    Every statement is checked before any runs. Statements run through `execute`, whose
    errors carry DuckDB's `LINE n: ...` pointer to the offending position. Past `timeout_s`
    the query is interrupted and `QueryTimeout` raised.
    """
    check_read_only(con, sql)
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        for statement in con.extract_statements(sql):
            cursor = con.execute(statement.query)
            rows = cursor.fetchall()
            columns = [d[0] for d in cursor.description or []]
    except duckdb.InterruptException:
        raise QueryTimeout(
            f"the query ran past its limit of {timeout_s:g} s (`lake.sql_timeout_s`)"
        ) from None
    finally:
        if timer is not None:
            # Joined, not only cancelled: a thread still winding down while the interpreter
            # exits (a CLI error path) aborted the process in DuckDB's C++ unwinding.
            timer.cancel()
            timer.join()
    return columns, rows


def scan(lake: Lake | str | os.PathLike[str], table: str, version: int | None = None) -> pl.LazyFrame:
    """A polars LazyFrame of a table (one row per key), at `version` or the newest."""
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
