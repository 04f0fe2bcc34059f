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
import re
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from store.errors import ReadOnlyViolation
from store.lake import Lake
from store.layout import base_name, compact_generation, dir_name
from store.replaced import pending_files
from store.schema import PARTITION_COLUMN, TABLES, WRITTEN_AT, TableSpec, table_spec

_READ_ONLY_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def _duckdb_types(spec: TableSpec, con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(column, DuckDB type) for every column of the table's schema."""
    name = f"__empty_{spec.name}"
    con.register(name, spec.schema.empty_table())
    try:
        return [(row[0], row[1]) for row in con.execute(f"DESCRIBE SELECT * FROM {name}").fetchall()]
    finally:
        con.unregister(name)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def raw_relation_sql(lake: Lake, spec: TableSpec) -> str:
    """Every committed row of a table, duplicates included (what plain DuckDB sees)."""
    return (
        f"read_parquet({_literal(lake.glob(spec.name))}, "
        f"hive_partitioning={str(spec.partitioned).lower()}, union_by_name=true)"
    )


@dataclass(frozen=True)
class Snapshot:
    """The files of one table at one moment, split by what their names promise (`store.layout`)."""

    compacted: tuple[str, ...]  # live compacted files: each key at most once across them
    other: tuple[str, ...]  # part files, foreign files, and compacted files already replaced


def snapshot(lake: Lake, table: str) -> Snapshot:
    """List a table's committed files once and classify them.

    Files that compaction already replaced are left out: the records are read before
    the listing, so the compacted file holding their rows is in the listing.
    """
    replaced = pending_files(lake, table)
    files = [f for f in lake.data_files(table) if f not in replaced]
    newest: dict[str, int] = {}
    for path in files:
        generation = compact_generation(base_name(path))
        if generation is not None:
            directory = dir_name(path)
            newest[directory] = max(generation, newest.get(directory, -1))
    compacted: list[str] = []
    other: list[str] = []
    for path in files:
        generation = compact_generation(base_name(path))
        live = generation is not None and generation == newest[dir_name(path)]
        (compacted if live else other).append(path)
    return Snapshot(tuple(compacted), tuple(other))


def _read_files_sql(lake: Lake, spec: TableSpec, files: tuple[str, ...], typed: str, cols: str) -> str:
    urls = ", ".join(_literal(path if lake.is_local else f"{lake.protocol}://{path}") for path in files)
    # Union with a typed empty row set so that columns no file has yet (additive schema
    # evolution) still exist, with the schema's types.
    return (
        f"SELECT {cols} FROM ({typed} UNION ALL BY NAME SELECT * FROM read_parquet([{urls}], "
        f"hive_partitioning={str(spec.partitioned).lower()}, union_by_name=true))"
    )


def table_view_sql(
    lake: Lake, spec: TableSpec, con: duckdb.DuckDBPyConnection, files: Snapshot | None = None
) -> str:
    """The deduplicated view of one table over one snapshot of its files: the newest row per key.

    Every scan in the view reads the same explicit file list, so a query sees one
    consistent state of the lake even while writers commit and compaction replaces files.
    Live compacted files hold each key once (see `store.layout`), so their rows need no
    deduplication among themselves: a compacted row survives unless a strictly newer row
    of its key is among the other files (`p`), and a `p` row survives if it is the newest
    of its key among `p` rows and no compacted row is as new (a tie means compaction
    copied it: the copy wins). Only keys that repeat among `p` rows go through a window;
    repeats are found on a 64-bit hash of the key (a collision only sends a unique key
    through the window too, which is still correct).
    A freshly compacted table therefore reads like plain Parquet.
    """
    files = files if files is not None else snapshot(lake, spec.name)
    types = _duckdb_types(spec, con)
    cols = ", ".join(_quote(c) for c, _ in types)
    typed = "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {_quote(c)}" for c, t in types) + " WHERE false"
    if not files.compacted and not files.other:
        return typed
    if not files.other:
        return _read_files_sql(lake, spec, files.compacted, typed, cols)
    key = ", ".join(_quote(k) for k in spec.key)
    p_new = f"""
        WITH p AS NOT MATERIALIZED ({_read_files_sql(lake, spec, files.other, typed, cols)}),
        p_dup AS MATERIALIZED (SELECT hash({key}) AS __h FROM p GROUP BY 1 HAVING count(*) > 1)
        SELECT * FROM p ANTI JOIN p_dup ON hash({key}) = p_dup.__h
        UNION ALL
        (SELECT * FROM p SEMI JOIN p_dup ON hash({key}) = p_dup.__h
         QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {WRITTEN_AT} DESC) = 1)
    """
    if not files.compacted:
        return p_new
    on = " AND ".join(f"c.{_quote(k)} = p_new.{_quote(k)}" for k in spec.key)
    return f"""
        WITH c AS NOT MATERIALIZED ({_read_files_sql(lake, spec, files.compacted, typed, cols)}),
        p_new AS NOT MATERIALIZED ({p_new})
        SELECT {cols} FROM c ANTI JOIN p_new ON {on} AND {_stamp("p_new")} > {_stamp("c")}
        UNION ALL
        SELECT {cols} FROM p_new ANTI JOIN c ON {on} AND {_stamp("c")} >= {_stamp("p_new")}
    """


def _stamp(alias: str) -> str:
    # Files written by other tools may lack `_written_at`: their rows count as the oldest.
    return f"coalesce({alias}.{WRITTEN_AT}, {EPOCH_SQL})"


EPOCH_SQL = "CAST(TIMESTAMPTZ '1970-01-01 00:00:00+00' AS TIMESTAMPTZ_NS)"


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

    The views read a snapshot: the files committed when `connect` (or `refresh`) ran.
    Every query on the connection therefore sees one consistent state of the lake, even
    while writers commit and compaction merges files. Data committed later is seen after
    `refresh(con, lake)` or on a new connection; connections are cheap, so take a new
    one per unit of work. Compaction deletes the files it replaced only after a grace
    period (`CompactConfig.grace_seconds`), so refresh connections older than that.
    `read_only=True` also locks the connection against writing files, attaching
    databases and loading extensions (see `run_read_only`).
    """
    lake = Lake.of(lake)
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    refresh(con, lake)
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
    con.execute(GROUP_STATS_MACRO)
    if read_only:
        _lock_down(con, lake)
    return con


def refresh(con: duckdb.DuckDBPyConnection, lake: Lake | str | os.PathLike[str]) -> None:
    """Point the table views of a `connect`ed connection at the lake's current files."""
    lake = Lake.of(lake)
    for spec in TABLES.values():
        con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {table_view_sql(lake, spec, con)}')


def _lock_down(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    # Defence in depth behind the statement check in `run_read_only`: no extension can be
    # loaded, and the settings (including these) cannot be changed back.
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise `ReadOnlyViolation` unless every statement in `sql` only reads.

    `EXPLAIN ANALYZE` runs the statement it explains, so that statement is checked too.
    """
    for statement in con.extract_statements(sql):
        if statement.type not in _READ_ONLY_STATEMENTS:
            raise ReadOnlyViolation(statement.type.name, statement.query)
        if statement.type == duckdb.StatementType.EXPLAIN:
            inner = _EXPLAIN.sub("", statement.query, count=1)
            if inner.strip() and inner != statement.query:
                check_read_only(con, inner)


def run_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run user SQL that may only read; (columns, rows) of the last statement.

    Every statement is checked before any runs. Statements run through `execute`, whose
    errors carry DuckDB's `LINE n: ...` pointer to the offending position.
    """
    check_read_only(con, sql)
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    for statement in con.extract_statements(sql):
        cursor = con.execute(statement.query)
        rows = cursor.fetchall()
        columns = [d[0] for d in cursor.description or []]
    return columns, rows


def scan(lake: Lake | str | os.PathLike[str], table: str) -> pl.LazyFrame:
    """A polars LazyFrame of a table, deduplicated on its key like the DuckDB view."""
    lake = Lake.of(lake)
    spec = table_spec(table)
    # The same files as the views: those compaction replaced are left out (their rows are
    # in the live compacted files, and a grace-period reclaim may delete them mid-scan).
    snap = snapshot(lake, table)
    files = sorted([*snap.compacted, *snap.other])
    if not files:
        return pl.DataFrame(spec.schema.empty_table()).lazy()
    # A pyarrow dataset with the table's full schema: files missing newer columns read as
    # nulls (whatever file comes first), and remote lakes use the lake's own filesystem.
    frame = pl.scan_pyarrow_dataset(
        ds.dataset(
            files,
            schema=spec.schema,
            format="parquet",
            filesystem=lake.arrow_fs,
            partitioning=ds.partitioning(pa.schema([spec.schema.field(PARTITION_COLUMN)]), flavor="hive")
            if spec.partitioned
            else None,
            partition_base_dir=lake.table_dir(table),
        )
    )
    # Rows without `_written_at` (files from other tools) count as the oldest.
    stamp = pl.col(WRITTEN_AT).fill_null(pl.lit(0).cast(pl.Datetime("ns", "UTC")))
    newest = stamp == stamp.max().over(list(spec.key))
    # A tie is the same row in a compacted file and in a file it replaced: keep one.
    return frame.filter(newest).unique(subset=list(spec.key), keep="any")
