"""SQL over the lake: a DuckDB connection with one deduplicated view per table, plus derived views.

Each table view reads the table's Parquet files directly (`read_parquet` over the
table's glob, hive partitions, files unioned by column name so older files missing a
newer column read as nulls) and keeps, per primary key, the row with the newest
`_written_at`. Derived views:

- `messages`: one row per message, with `trajectory_id` and its 0-based `position`;
- `latest_rewards`: per (`trajectory_id`, `name`) the newest successful reward, any scorer;
- `groups`: per (`group_id`, reward `name`): size, mean, std, min, max, `all_equal`;
  the table macro `group_stats(reward_name)` gives the same for one chosen reward.

Polars users get the same deduplicated tables as LazyFrames from `scan`.
"""

from __future__ import annotations

import os

import duckdb
import polars as pl

from store.errors import ReadOnlyViolation
from store.lake import Lake
from store.schema import PARTITION_COLUMN, TABLES, WRITTEN_AT, TableSpec, table_spec

_READ_ONLY_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def _empty_select(spec: TableSpec, con: duckdb.DuckDBPyConnection) -> str:
    """A zero-row SELECT with the table's column types, for a table with no files yet."""
    empty = spec.schema.empty_table()
    name = f"__empty_{spec.name}"
    con.register(name, empty)
    types = con.execute(f"DESCRIBE SELECT * FROM {name}").fetchall()
    con.unregister(name)
    cols = ", ".join(f'CAST(NULL AS {t[1]}) AS "{t[0]}"' for t in types)
    return f"SELECT {cols} WHERE false"


def raw_relation_sql(lake: Lake, spec: TableSpec) -> str:
    """Every committed row of a table, duplicates included (what plain DuckDB sees)."""
    glob = lake.glob(spec.name).replace("'", "''")
    return (
        f"read_parquet('{glob}', hive_partitioning={str(spec.partitioned).lower()}, "
        "union_by_name=true)"
    )


def table_view_sql(lake: Lake, spec: TableSpec, con: duckdb.DuckDBPyConnection) -> str:
    if not lake.data_files(spec.name):
        return _empty_select(spec, con)
    key = ", ".join(f'"{k}"' for k in spec.key)
    return (
        f"SELECT * FROM {raw_relation_sql(lake, spec)} "
        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {WRITTEN_AT} DESC) = 1"
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
    "latest_rewards": """
        SELECT * FROM rewards
        WHERE status IS DISTINCT FROM 'failed' AND value IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY trajectory_id, name ORDER BY scored_at DESC, _written_at DESC) = 1
    """,
    "groups": """
        SELECT t.group_id, any_value(t.scenario_id) AS scenario_id, r.name,
               count(*) AS size, avg(r.value) AS mean, coalesce(stddev_pop(r.value), 0) AS std,
               min(r.value) AS min, max(r.value) AS max, min(r.value) = max(r.value) AS all_equal
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE t.group_id IS NOT NULL
        GROUP BY t.group_id, r.name
    """,
}

GROUP_STATS_MACRO = """
    CREATE OR REPLACE MACRO group_stats(reward_name) AS TABLE
    SELECT * FROM groups WHERE name = reward_name
"""


def connect(
    lake: Lake | str | os.PathLike[str],
    *,
    read_only: bool = False,
    threads: int | None = None,
    memory_limit: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the lake's views.

    Views list the lake's files when a query binds, so files committed after `connect`
    are seen; a table that had no files at all at connect time stays empty until the
    next `connect`. `read_only=True` also locks the connection against writing files,
    attaching databases and loading extensions (see `run_read_only`).
    """
    lake = Lake.of(lake)
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    for spec in TABLES.values():
        con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {table_view_sql(lake, spec, con)}')
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
    con.execute(GROUP_STATS_MACRO)
    if read_only:
        _lock_down(con, lake)
    return con


def _lock_down(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    # Defence in depth behind the statement check in `run_read_only`: no extension can be
    # loaded, and the settings (including these) cannot be changed back.
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise `ReadOnlyViolation` unless every statement in `sql` only reads."""
    for statement in con.extract_statements(sql):
        if statement.type not in _READ_ONLY_STATEMENTS:
            raise ReadOnlyViolation(statement.type.name, statement.query)


def run_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.DuckDBPyRelation | None:
    """Run user SQL that may only read: each statement is checked before any is run."""
    check_read_only(con, sql)
    statements = con.extract_statements(sql)
    relation = None
    for statement in statements:
        relation = con.sql(statement.query)
    return relation


def scan(lake: Lake | str | os.PathLike[str], table: str) -> pl.LazyFrame:
    """A polars LazyFrame of a table, deduplicated on its key like the DuckDB view."""
    lake = Lake.of(lake)
    spec = table_spec(table)
    files = lake.data_files(table)
    if not files:
        return pl.LazyFrame(schema=pl.from_arrow(spec.schema.empty_table()).schema)
    source = files if lake.is_local else [f"{lake.protocol}://{f}" for f in files]
    frame = pl.scan_parquet(
        source,
        hive_partitioning=spec.partitioned,
        missing_columns="insert",
        extra_columns="ignore",
        storage_options=lake.storage_options or None,
    )
    newest = pl.col(WRITTEN_AT) == pl.col(WRITTEN_AT).max().over(list(spec.key))
    return frame.filter(newest)
