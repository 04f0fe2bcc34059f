"""`trajlake sql`, `trajlake tables`, `trajlake compact` through the real CLI."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.lake import Lake
from store.writer import write
from tests.store.helpers import all_files, make_traj

runner = CliRunner()


@pytest.fixture
def filled(lake: Lake) -> Lake:
    write(lake, "trajectories", [make_traj(i, model=f"m{i % 2}") for i in range(6)])
    write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft", "metrics": '{"loss": 1.5}'}])
    return lake


def _sql(lake: Lake, query: str, *options: str) -> object:
    return runner.invoke(app, ["sql", query, "--lake", lake.root, *options])


def test_json_format_is_one_array_of_objects_with_nested_values(filled: Lake) -> None:
    result = _sql(
        filled,
        "SELECT trajectory_id, messages[1] AS first, started_at FROM trajectories ORDER BY 1 LIMIT 2",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["trajectory_id"] for r in rows] == ["t0", "t1"]
    assert rows[0]["first"]["content"] == "hello 0"
    assert rows[0]["started_at"].startswith("2026-11-20T12:00:00")


def test_csv_and_table_formats(filled: Lake) -> None:
    result = _sql(filled, "SELECT model, count(*) AS n FROM trajectories GROUP BY 1 ORDER BY 1", "-f", "csv")
    assert result.exit_code == 0
    assert list(csv.reader(io.StringIO(result.stdout))) == [["model", "n"], ["m0", "3"], ["m1", "3"]]
    table = _sql(filled, "SELECT model, count(*) AS n FROM trajectories GROUP BY 1 ORDER BY 1")
    assert table.exit_code == 0
    assert "m0" in table.stdout and "┃ model" in table.stdout
    bad = _sql(filled, "SELECT 1", "--format", "xml")
    assert bad.exit_code == 2 and "unknown --format `xml`" in bad.output


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("COPY (SELECT * FROM trajectories) TO '{out}'", "COPY"),
        ("COPY trajectories TO '{out}' (FORMAT parquet)", "COPY"),
        ("ATTACH '{out}' AS other", "ATTACH"),
        ("INSTALL httpfs", "LOAD"),
        ("LOAD httpfs", "LOAD"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("CREATE OR REPLACE VIEW trajectories AS SELECT 1", "CREATE"),
        ("SET threads = 1", "SET"),
        ("PRAGMA enable_profiling", "PRAGMA"),
        ("DROP VIEW trajectories", "DROP"),
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'", "COPY"),
        ("SELECT 1; COPY (SELECT 1) TO '{out}'", "COPY"),
        ("EXPORT DATABASE '{out}'", "EXPORT"),
    ],
)
def test_sql_is_read_only(filled: Lake, tmp_path: Path, query: str, kind: str) -> None:
    out = tmp_path / "stolen.out"
    before = all_files(filled)
    result = _sql(filled, query.format(out=out))
    assert result.exit_code == 2, result.output
    assert "read-only" in result.stderr
    assert kind in result.stderr
    assert not out.exists()
    assert all_files(filled) == before


def test_sql_error_shows_duckdb_message_and_position_without_traceback(filled: Lake) -> None:
    # A real process: what a user's terminal shows.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "sql", "SELECT modle FROM trajectories", "--lake", filled.root],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    assert 'Referenced column "modle" not found' in proc.stderr
    assert "LINE 1: SELECT modle FROM trajectories" in proc.stderr
    assert "^" in proc.stderr


@pytest.mark.parametrize(
    "query",
    [
        "SELEC 1",
        "SELECT * FROM nope",
        "SELECT 1/0::INT + 'a'",
        "SELECT * FROM read_parquet('/nowhere/*.parquet')",
    ],
)
def test_any_sql_error_exits_nonzero_without_traceback(filled: Lake, query: str) -> None:
    result = _sql(filled, query)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _cells(output: str, table: str) -> list[str]:
    line = next(ln for ln in output.splitlines() if f" {table} " in ln)
    return [c.strip() for c in line.strip("│ ").split("│")]


def test_tables_lists_versions_rows_files_bytes_and_newest(filled: Lake) -> None:
    write(filled, "trajectories", [make_traj(0, model="again")])  # an existing key: replaced
    result = runner.invoke(app, ["tables", "--lake", filled.root])
    assert result.exit_code == 0, result.output
    cells = _cells(result.stdout, "trajectories")
    assert cells[:3] == ["trajectories", "2", "6"]  # created at 0, written at 1, upserted at 2: still 6 rows
    assert int(cells[3]) >= 1 and int(cells[4]) > 0 and cells[5].startswith("20")
    assert _cells(result.stdout, "spans")[1:4] == ["", "0", "0"]  # nothing committed yet


def test_compact_command_rewrites_small_files_and_reports(filled: Lake) -> None:
    for i in range(3):  # three more commits: three more files in the partition
        write(filled, "trajectories", [make_traj(10 + i)])
    write(filled, "trajectories", [make_traj(0, model="again")])
    before = snapshot(filled)["trajectories"]
    result = runner.invoke(
        app, ["compact", "--lake", filled.root, "--table", "trajectories", "--retention-hours", "0"]
    )
    assert result.exit_code == 0, result.output
    table, version, partitions, removed, added, vacuumed = _cells(result.stdout, "trajectories")
    assert (table, partitions, added) == ("trajectories", "1", "1")
    assert int(removed) == len(before.files) > 1 and int(vacuumed) >= int(removed)  # retention 0: gone now
    after = snapshot(filled)["trajectories"]
    assert (
        int(version) == after.version > before.version and len(after.files) == 1
    )  # optimize + vacuum commits
    con = connect(filled)
    assert con.execute("SELECT count(*) FROM trajectories").fetchall() == [(9,)]
    assert con.execute("SELECT model FROM trajectories WHERE trajectory_id = 't0'").fetchall() == [("again",)]
    unknown = runner.invoke(app, ["compact", "--lake", filled.root, "--table", "trajectory"])
    assert unknown.exit_code == 2 and "unknown table `trajectory`" in unknown.stderr


@pytest.mark.parametrize(
    "query", ["DESCRIBE trajectories", "SHOW TABLES", "WITH x AS (SELECT 1 AS a) SELECT * FROM x"]
)
def test_select_like_statements_run(filled: Lake, query: str) -> None:
    result = _sql(filled, query, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_values_without_a_json_type_are_printed_as_text(filled: Lake) -> None:
    result = _sql(
        filled,
        "SELECT INTERVAL 1 DAY AS i, '6b0b1f4e-0000-4000-8000-000000000000'::UUID AS u, TIME '10:00' AS t",
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row == {"i": "1 day, 0:00:00", "u": "6b0b1f4e-0000-4000-8000-000000000000", "t": "10:00:00"}


# Message content that would drive an analyst's terminal if printed raw: a clipboard write
# (OSC 52), a screen clear, an OSC 8 hyperlink whose text hides its target, a carriage
# return that overwrites the line, a one-byte CSI (C1) and a right-to-left override.
HOSTILE = (
    "copy \x1b]52;c;Y3VybCBldmlsLnNo\x07 then \x1b[2J clear, "
    "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\ and\rover \x9b31m \u202eexe.txt"
    "\nsecond line [bold]not markup[/bold]"
)


def _cli(lake: Lake, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", "sql", *args, "--lake", lake.root],
        capture_output=True,
        env=env,
        timeout=120,
    )


def test_the_table_format_shows_control_characters_escaped_and_csv_json_keep_them(lake: Lake) -> None:
    messages = [{"role": "user", "content": HOSTILE}, {"role": "assistant", "content": "ok"}]
    write(lake, "trajectories", [make_traj(0, messages=messages)])
    query = "SELECT messages[1].content AS content FROM trajectories"

    table = _cli(lake, query)
    assert table.returncode == 0, table.stderr
    shown = table.stdout.decode()
    # Nothing a terminal acts on reaches it: no ESC, BEL, CR, C1 or bidi control.
    assert not any(c in shown for c in "\x1b\x07\r\x9b\u202e"), repr(shown)
    for escaped in (
        r"\x1b]52;c;Y3VybCBldmlsLnNo\x07",
        r"\x1b[2J",
        r"\x1b]8;;https://evil.example/\x1b\click here",
    ):
        assert escaped in shown, (escaped, shown)
    assert r"and\rover \x9b31m \u202eexe.txt" in shown
    # A line break stays one (the cell's second line), and markup-like text is shown as written.
    assert "second line [bold]not markup[/bold]" in shown

    as_json = _cli(lake, query, "--format", "json")
    assert json.loads(as_json.stdout) == [{"content": HOSTILE}]
    as_csv = _cli(lake, query, "--format", "csv")
    assert list(csv.reader(io.StringIO(as_csv.stdout.decode(), newline=""))) == [["content"], [HOSTILE]]


def test_the_table_shows_a_screenful_of_rows_and_cut_cells_while_csv_prints_everything(
    lake: Lake,
) -> None:
    long_answer = "x" * 5_000
    rows = [make_traj(i) for i in range(50)]
    rows[0]["final_output"] = long_answer
    write(lake, "trajectories", rows)
    query = "SELECT trajectory_id, final_output FROM trajectories ORDER BY trajectory_id"
    table = _sql(lake, query)
    assert table.exit_code == 0, table.output
    assert "50 rows, the first 40 shown" in table.output
    assert sum(line.startswith("│ t") for line in table.output.splitlines()) == 40
    assert long_answer not in table.output and "(5,000 characters)" in table.output
    everything = _sql(lake, query, "--max-rows", "0")
    assert "rows, the first" not in everything.output
    shown = _sql(lake, query, "--max-rows", "3")
    assert "50 rows, the first 3 shown" in shown.output
    as_csv = list(csv.reader(io.StringIO(_sql(lake, query, "--format", "csv").output)))
    assert len(as_csv) == 51 and long_answer in {r[1] for r in as_csv}
    refused = _sql(lake, query, "--max-rows", "-1")
    assert refused.exit_code == 2
