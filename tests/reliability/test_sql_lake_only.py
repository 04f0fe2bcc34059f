"""`Lake.sql_lake_only`: SQL that reads the lake's tables and nothing else (issue 13, #9; issue 45).

Library connections (`store.catalog.connection.connect`: selections, `--sql-reward`, scenario queries) never
open a file: the tables come in as Arrow datasets and DuckDB's external access is off with
nothing allowed, not even the table folders (what DuckDB may read it may also write).
`trajlake sql` (`store.user_sql.query_lake`) reads local files too, on a thread the kernel forbids
to write (Landlock), unless `sql_lake_only` is on: then it reads the tables only, for a
local lake and for an S3 lake (no other bucket, no other prefix).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from store.catalog.connection import connect, refresh
from store.lake import Lake
from store.sandbox import write_sandbox_problem
from store.user_sql import query_lake
from store.writer import write
from tests.conftest import s3_lake_at
from tests.store.helpers import make_traj

pytestmark = pytest.mark.reliability

OUTSIDE = [
    "SELECT * FROM read_csv('{secret}')",
    "SELECT * FROM read_blob('{secret}')",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM glob('{home}/**')",
    "SELECT * FROM read_csv('{lake}/../outside.csv')",  # out of the lake by `..`
    "SELECT * FROM read_text('{lake}/_spool/anything')",  # in the lake folder, not a table
    "SELECT count(*) FROM read_parquet('{lake}/trajectories/**/*.parquet')",  # a table, by path
    "SELECT * FROM read_parquet('https://example.com/x.parquet')",
]


@pytest.fixture
def filled(lake: Lake, tmp_path: Path) -> Lake:
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    (tmp_path / "outside.csv").write_text("password\nhunter2\n")
    return lake


def query(lake: Lake, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    return query_lake(lake, sql).rows


@pytest.mark.skipif(write_sandbox_problem() is not None, reason="no write sandbox (Landlock) here")
def test_without_the_switch_sql_reads_local_files(filled: Lake, tmp_path: Path) -> None:
    # The user's own shell: reading a local CSV next to the lake is a feature.
    assert query(filled, f"SELECT * FROM read_csv('{tmp_path / 'outside.csv'}')") == [("hunter2",)]


def test_library_connections_read_no_file_with_or_without_the_switch(filled: Lake, tmp_path: Path) -> None:
    for lake in (filled, Lake(filled.root, sql_lake_only=True)):
        for read_only in (True, False):
            with connect(lake, read_only=read_only) as con, pytest.raises(duckdb.PermissionException):
                con.execute(f"SELECT * FROM read_csv('{tmp_path / 'outside.csv'}')").fetchall()


@pytest.mark.parametrize("sql", OUTSIDE)
def test_with_the_switch_nothing_outside_the_tables_is_read(filled: Lake, tmp_path: Path, sql: str) -> None:
    confined = Lake(filled.root, sql_lake_only=True)
    text = sql.format(secret=tmp_path / "outside.csv", home=tmp_path, lake=filled.root)
    with pytest.raises(duckdb.Error, match=r"disabled by configuration|Permission"):
        query(confined, text)


def test_with_the_switch_every_view_still_reads(filled: Lake) -> None:
    confined = Lake(filled.root, sql_lake_only=True)
    assert query(confined, "SELECT count(*) FROM trajectories") == [(3,)]
    assert query(confined, "SELECT count(*) > 0 FROM messages") == [(True,)]
    with connect(confined) as con:
        # File access cannot be turned back on, nor a folder allowed.
        for statement in ("SET enable_external_access = true", "SET allowed_directories = ['/']"):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        write(filled, "trajectories", [make_traj(9)])
        refresh(con, confined)  # a newer snapshot is handed over as data, not as paths
        assert con.execute("SELECT count(*) FROM trajectories").fetchall() == [(4,)]


def test_an_s3_lake_reads_its_tables_and_no_other_bucket(s3_endpoint: str) -> None:
    pytest.importorskip("moto.server")
    lake = s3_lake_at(s3_endpoint, "confined-lake")
    other = s3_lake_at(s3_endpoint, "other-bucket")
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    write(other, "trajectories", [make_traj(i) for i in range(5)])
    confined = Lake(lake.root, lake.storage_options, sql_lake_only=True)
    assert query(confined, "SELECT count(*) FROM trajectories") == [(3,)]
    for sql in (
        f"SELECT count(*) FROM read_parquet('{other.root}/trajectories/**/*.parquet')",
        "SELECT count(*) FROM read_parquet('s3://confined-lake/elsewhere/*.parquet')",
    ):
        with pytest.raises(duckdb.Error, match=r"disabled by configuration|Permission"):
            query(confined, sql)
    # Without the switch the tables still come from the lake alone, and the sandbox that lets
    # `trajlake sql` read local files has no network: no other bucket either way.
    for sql in (f"SELECT count(*) FROM read_parquet('{other.root}/trajectories/**/*.parquet')",):
        with pytest.raises(duckdb.Error):
            query(lake, sql)
    assert query(lake, "SELECT count(*) FROM trajectories") == [(3,)]


POOL_PROBE = """
import sys
import pyarrow as pa, pyarrow.dataset as ds
from store.lake import Lake
from store.user_sql import query_lake
from store.writer import write
from tests.store.helpers import make_traj
lake = Lake(sys.argv[1] + "/lake")
write(lake, "trajectories", [make_traj(i) for i in range(4)])  # starts no pyarrow pool thread
result = query_lake(lake, "SELECT count(*) FROM trajectories WHERE trajectory_id > 't1'")
assert result.local_files, result
print(result.rows)
# A pyarrow pool thread the query started would refuse this write (Landlock is inherited).
table = pa.table({"a": list(range(100_000))})
ds.write_dataset(table, sys.argv[1] + "/out", format="parquet", max_rows_per_file=10_000, max_rows_per_group=10_000)
print(len(ds.dataset(sys.argv[1] + "/out").files))
"""


@pytest.mark.skipif(write_sandbox_problem() is not None, reason="no write sandbox (Landlock) here")
def test_the_sandboxed_query_leaves_the_process_able_to_write(tmp_path: Path) -> None:
    """The sandbox is one thread's: a pyarrow pool thread started inside it would keep the
    restriction for the life of the process (its next `write_dataset` got `Permission
    denied`), so a local lake's files are read by DuckDB itself there."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", POOL_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[(2,)]", "10"]
