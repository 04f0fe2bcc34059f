"""User SQL cannot write: every trick an outside tester (and we) could think of, refused by the
read-only connection, on a plain lake and with `sql_lake_only`, and nothing on disk changes.
The generated corpus of every statement type in every place is `test_sql_corpus.py`.

Statement types come from DuckDB's parser (`extract_statements`) and its tokenizer finds
what an EXPLAIN explains, so comments in front of `EXPLAIN ANALYZE COPY` change nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

WRITES = [
    "/* c */ EXPLAIN ANALYZE COPY (SELECT 42) TO '{out}'",
    "-- c\nEXPLAIN ANALYZE COPY (SELECT 42) TO '{out}'",
    "/* a */ /* b */ explain analyse copy (select 42) to '{out}'",
    "EXPLAIN /* c */ ANALYZE /* d */ COPY (SELECT 42) TO '{out}'",
    "EXPLAIN (ANALYZE) COPY (SELECT 42) TO '{out}'",
    "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 42) TO '{out}'",
    "EXPLAIN COPY (SELECT 42) TO '{out}'",
    "COPY (SELECT 42) TO '{out}'",
    "SELECT 1; COPY (SELECT 42) TO '{out}'",
    "SELECT 1; /* c */ EXPLAIN ANALYZE COPY (SELECT 42) TO '{out}'",
    "COPY trajectories TO '{out}' (FORMAT parquet)",
    "EXPORT DATABASE '{dir}'",
    "ATTACH '{db}' AS other",
    "CREATE TABLE t AS SELECT 1",
    "CREATE OR REPLACE VIEW trajectories AS SELECT 1",
    "INSERT INTO trajectories SELECT * FROM trajectories",
    "SET enable_external_access = true",
    "PRAGMA profiling_output = '{out}'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "CALL pragma_version()",
]
# Inside the lake: a committed data file overwritten with injected rows (with sql_lake_only the
# table folders are readable, so only the statement check stands between a COPY and the file).
INSIDE_THE_LAKE = [
    "/* c */ EXPLAIN ANALYZE COPY (SELECT * FROM trajectories) TO '{data_file}' (FORMAT parquet)",
    "-- c\nEXPLAIN ANALYZE COPY (SELECT * FROM trajectories UNION ALL SELECT * FROM trajectories) "
    "TO '{data_file}' (FORMAT parquet)",
    "COPY (SELECT 1 AS x) TO '{lake}/trajectories/injected.parquet' (FORMAT parquet)",
]


# Statements nested where DuckDB's grammar lets one sit (issue 45): the statement check sees a
# SELECT; the connection is what refuses (no file access, or a kernel that forbids writing).
NESTED = [
    "WITH a AS (COPY (SELECT * FROM read_csv('/etc/passwd')) TO '{out}') SELECT 42",
    "WITH a AS MATERIALIZED (COPY (SELECT 42 AS x) TO '{out}') SELECT * FROM a",
    "WITH a AS (COPY (SELECT 1 AS x) TO '{data_file}' (FORMAT parquet)) SELECT 42",
    "WITH a AS (COPY (SELECT 1 AS p) TO '{dir}' (PARTITION_BY (p))) SELECT 42",
    "SELECT * FROM (WITH a AS (COPY (SELECT 42 AS x) TO '{out}') SELECT 1)",
    "SELECT (SELECT count(*) FROM (WITH a AS (COPY (SELECT 42 AS x) TO '{out}') SELECT 1))",
    "PREPARE p AS COPY (SELECT 42 AS x) TO '{out}'; EXECUTE p",
    "PREPARE p AS WITH a AS (COPY (SELECT 42 AS x) TO '{out}') SELECT 1; EXECUTE p",
    "SELECT * FROM query('COPY (SELECT 42 AS x) TO ''{out}''')",
    "SELECT * FROM query('WITH a AS (COPY (SELECT 42 AS x) TO ''{out}'') SELECT 1')",
    "EXPLAIN ANALYZE WITH a AS (COPY (SELECT 42 AS x) TO '{out}') SELECT 42",
]


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def filled(lake: Lake) -> Lake:
    write(lake, "trajectories", [make_traj(i) for i in range(4)])
    return lake


@pytest.mark.parametrize("lake_only", [False, True])
@pytest.mark.parametrize("sql", WRITES + INSIDE_THE_LAKE)
def test_trajlake_sql_refuses_every_write(filled: Lake, tmp_path: Path, sql: str, lake_only: bool) -> None:
    data_file = next((Path(filled.root) / "trajectories").rglob("*.parquet"))
    text = sql.format(
        out=tmp_path / "out.csv",
        dir=tmp_path / "export",
        db=tmp_path / "other.duckdb",
        data_file=data_file,
        lake=filled.root,
    )
    (tmp_path / "trajlake.toml").write_text(f"[lake]\nsql_lake_only = {str(lake_only).lower()}\n")
    before = _files(Path(filled.root))
    result = CliRunner().invoke(
        app,
        ["sql", "--lake", filled.root, "--", text],
        env={"TRAJLAKE_CONFIG": str(tmp_path / "trajlake.toml")},
    )
    assert result.exit_code == 2, result.output
    assert "read-only" in result.output or "disabled by configuration" in result.output
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "export").exists()
    assert not (tmp_path / "other.duckdb").exists()
    assert _files(Path(filled.root)) == before
    with connect(filled, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (4,)


@pytest.mark.parametrize("lake_only", [False, True])
@pytest.mark.parametrize("sql", NESTED)
def test_nested_writes_are_impossible(filled: Lake, tmp_path: Path, sql: str, lake_only: bool) -> None:
    data_file = next((Path(filled.root) / "trajectories").rglob("*.parquet"))
    text = sql.format(out=tmp_path / "out.csv", dir=tmp_path / "parts", data_file=data_file)
    (tmp_path / "trajlake.toml").write_text(f"[lake]\nsql_lake_only = {str(lake_only).lower()}\n")
    before = _files(Path(filled.root))
    result = CliRunner().invoke(
        app,
        ["sql", "--lake", filled.root, "--", text],
        env={"TRAJLAKE_CONFIG": str(tmp_path / "trajlake.toml")},
    )
    assert result.exit_code in (1, 2) and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "parts").exists()
    assert _files(Path(filled.root)) == before
    # The library's connections refuse it too, with no statement check in front.
    with connect(filled, read_only=True) as con:
        for statement in con.extract_statements(text):
            try:
                con.execute(statement.query).fetchall()
            except duckdb.Error:
                pass
    assert not (tmp_path / "out.csv").exists() and _files(Path(filled.root)) == before


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM trajectories",
        "/* c */ EXPLAIN ANALYZE SELECT count(*) FROM trajectories",
        "EXPLAIN (ANALYZE, FORMAT json) SELECT 1",
        "-- c\nWITH t AS (SELECT 1 AS x) SELECT * FROM t",
        "DESCRIBE trajectories",
    ],
)
def test_reading_still_works(filled: Lake, sql: str) -> None:
    result = CliRunner().invoke(app, ["sql", "--lake", filled.root, "--", sql])
    assert result.exit_code == 0, result.output


def test_a_query_past_its_time_limit_is_interrupted(filled: Lake, tmp_path: Path) -> None:
    (tmp_path / "trajlake.toml").write_text("[lake]\nsql_timeout_s = 0.5\n")
    result = CliRunner().invoke(
        app,
        ["sql", "--lake", filled.root, "SELECT count(*) FROM range(1000000000000)"],
        env={"TRAJLAKE_CONFIG": str(tmp_path / "trajlake.toml")},
    )
    assert result.exit_code == 2 and "ran past its limit of 0.5 s" in result.output


def test_a_query_past_its_memory_limit_fails_without_spilling(filled: Lake, tmp_path: Path) -> None:
    (tmp_path / "trajlake.toml").write_text('[lake]\nsql_memory_limit = "64MB"\n')
    result = CliRunner().invoke(
        app,
        ["sql", "--lake", filled.root, "SELECT list(range) FROM range(40000000)"],
        env={"TRAJLAKE_CONFIG": str(tmp_path / "trajlake.toml")},
    )
    assert result.exit_code == 1 and "memory" in result.output.lower(), result.output


def test_a_failing_query_exits_cleanly_every_time(filled: Lake) -> None:
    """The time limit's timer must be gone before the process exits: a thread still winding down
    at exit aborted the interpreter about one run in two ('FATAL: exception not rethrown')."""
    import subprocess
    import sys

    for _ in range(4):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "flows.cli",
                "sql",
                "--lake",
                filled.root,
                "SELECT modle FROM trajectories",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and "Binder Error" in done.stderr + done.stdout, done.stderr[-500:]
