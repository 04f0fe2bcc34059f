"""A generated corpus of SQL: every statement type in every place DuckDB's grammar lets one nest.

Statement types are the ones that write, change settings or reach outside (COPY in its forms,
EXPORT, ATTACH, INSTALL/LOAD, CREATE incl. persistent secrets, INSERT/UPDATE/DELETE, SET,
PRAGMA, CALL, CHECKPOINT, VACUUM) plus a plain SELECT. Places are where a statement can sit:
top level, after another statement, a CTE (plain, materialized, recursive, inside a
subquery), PREPARE/EXECUTE, EXPLAIN (ANALYZE), `query()`/`query_table()`, subqueries,
UNION, LATERAL, DESCRIBE/SUMMARIZE. Their product is filtered by DuckDB's own parser: what
it accepts is the corpus (what it refuses cannot run anywhere). Targets rotate so each
statement aims at every kind of file: one in a temp folder, one relative to the working
directory, a committed data file of the lake, a new file in a table folder, one in `/tmp`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

# `{out}` a file, `{dir}` a folder, `{db}` a database file: filled from `Targets`.
STATEMENTS: dict[str, str] = {
    "copy_csv": "COPY (SELECT 42 AS x) TO '{out}'",
    "copy_parquet_lake_rows": "COPY (SELECT * FROM trajectories) TO '{out}' (FORMAT parquet)",
    "copy_table": "COPY trajectories TO '{out}'",
    "copy_partitioned": "COPY (SELECT 1 AS p, 2 AS x) TO '{dir}' (PARTITION_BY (p))",
    "copy_no_tmp_file": "COPY (SELECT 42 AS x) TO '{out}' (USE_TMP_FILE false)",
    "export_database": "EXPORT DATABASE '{dir}'",
    "attach": "ATTACH '{db}' AS other",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "create_table": "CREATE TABLE t AS SELECT 1 AS x",
    "create_view": "CREATE OR REPLACE VIEW trajectories AS SELECT 1 AS x",
    "persistent_secret": "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "insert": "INSERT INTO trajectories SELECT * FROM trajectories",
    "update": "UPDATE trajectories SET model = 'x'",
    "delete": "DELETE FROM trajectories",
    "set_external_access": "SET enable_external_access = true",
    "set_log_query_path": "SET log_query_path = '{out}'",
    "set_temp_directory": "SET temp_directory = '{dir}'",
    "pragma_profiling_output": "PRAGMA profiling_output = '{out}'",
    "call_logging_to_file": "CALL enable_logging(storage = 'file', storage_path = '{dir}')",
    "checkpoint": "CHECKPOINT",
    "vacuum": "VACUUM",
    "select": "SELECT 42 AS x",
}
READS_ONLY = {"select"}

# `{s}` the statement, `{q}` the statement as a SQL string literal's body.
PLACES: dict[str, str] = {
    "top": "{s}",
    "after_select": "SELECT 1; {s}",
    "cte": "WITH a AS ({s}) SELECT 42",
    "cte_read": "WITH a AS ({s}) SELECT * FROM a",
    "cte_materialized": "WITH a AS MATERIALIZED ({s}) SELECT * FROM a",
    "cte_recursive": "WITH RECURSIVE a AS ({s}) SELECT 1",
    "cte_in_subquery": "SELECT * FROM (WITH a AS ({s}) SELECT 1)",
    "cte_commented": "/* c */ WITH a AS ({s}) SELECT 42",
    "prepare_execute": "PREPARE p AS {s}; EXECUTE p",
    "explain": "EXPLAIN {s}",
    "explain_analyze": "EXPLAIN ANALYZE {s}",
    "explain_analyze_commented": "/* c */ EXPLAIN ANALYZE {s}",
    "explain_analyze_cte": "EXPLAIN ANALYZE WITH a AS ({s}) SELECT 42",
    "query_fn": "SELECT * FROM query('{q}')",
    "query_table_fn": "SELECT * FROM query_table('{q}')",
    "from_subquery": "SELECT * FROM ({s})",
    "scalar_subquery": "SELECT (SELECT count(*) FROM ({s}))",
    "exists": "SELECT EXISTS ({s})",
    "in_subquery": "SELECT 1 WHERE 1 IN ({s})",
    "union": "SELECT 42 UNION ALL ({s})",
    "lateral": "SELECT * FROM range(1) r, LATERAL ({s})",
    "describe": "DESCRIBE {s}",
    "summarize": "SUMMARIZE {s}",
    "create_view_as": "CREATE TEMP VIEW v AS {s}",
    "insert_select": "INSERT INTO trajectories {s}",
}


@dataclass(frozen=True)
class Targets:
    """Where the corpus aims its writes (one test's folders)."""

    tmp: Path  # a folder the test watches
    lake: Path
    data_file: Path  # a committed data file of the lake
    outside: Path  # an absolute path in /tmp, outside every watched folder

    def files(self) -> list[str]:
        return [
            str(self.tmp / "out.csv"),
            "relative-out.csv",  # the working directory
            str(self.data_file),
            str(self.lake / "trajectories" / "injected.parquet"),
            str(self.outside),
        ]

    def folders(self) -> list[str]:
        return [str(self.tmp / "out-dir"), "relative-dir", str(self.lake / "trajectories" / "dt=injected")]


@dataclass(frozen=True)
class Case:
    statement: str
    place: str
    sql: str

    @property
    def writes(self) -> bool:
        return self.statement not in READS_ONLY

    @property
    def id(self) -> str:
        return f"{self.statement}@{self.place}"


def parses(sql: str) -> bool:
    try:
        duckdb.extract_statements(sql)
    except duckdb.Error:
        return False
    return True


def corpus(targets: Targets) -> tuple[list[Case], int]:
    """(the cases DuckDB's parser accepts, how many of the product it refused)."""
    files, folders = targets.files(), targets.folders()
    cases, refused = [], 0
    for i, (statement, template) in enumerate(STATEMENTS.items()):
        for j, (place, shape) in enumerate(PLACES.items()):
            text = template.format(
                out=files[(i + j) % len(files)],
                dir=folders[(i + j) % len(folders)],
                db=files[(i + j) % len(files)] + ".duckdb",
            )
            sql = shape.format(s=text, q=text.replace("'", "''"))
            if parses(sql):
                cases.append(Case(statement, place, sql))
            else:
                refused += 1
    return cases, refused


def tree(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `roots`: (size, modification time in ns)."""
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        for folder, dirs, names in os.walk(root):
            for name in [*dirs, *names]:
                stat = os.lstat(os.path.join(folder, name))
                out[os.path.join(folder, name)] = (stat.st_size, stat.st_mtime_ns)
    return out


def changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(
        [f"created {p}" for p in after.keys() - before.keys()]
        + [f"removed {p}" for p in before.keys() - after.keys()]
        + [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    )
