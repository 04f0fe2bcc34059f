"""A lake on an S3-compatible object store: a real moto server on loopback, s3fs, DuckDB, polars."""

from __future__ import annotations

import pytest

from bench.synthetic import synthetic_rewards, synthetic_trajectories
from store.catalog.connection import connect, scan
from store.catalog.versions import snapshot
from store.errors import SchemaViolation
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.writer import write
from tests.conftest import s3_lake_at
from tests.store.helpers import make_traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

pytest.importorskip("moto.server")


@pytest.fixture
def s3_lake(s3_endpoint: str, request: pytest.FixtureRequest) -> Lake:
    return s3_lake_at(s3_endpoint, f"lake-{request.node.name.replace('_', '-')[:40].lower()}")


def test_write_query_scan_compact_round_trip(s3_lake: Lake) -> None:
    n = 300
    write(s3_lake, "trajectories", synthetic_trajectories(n, seed=3, batch_size=100, days=1))
    write(s3_lake, "trajectories", next(synthetic_trajectories(50, seed=3, days=1)))  # re-sent
    write(s3_lake, "rewards", synthetic_rewards(n, seed=3, days=1))
    files = snapshot(s3_lake)["trajectories"].files
    assert files and all(f.startswith(s3_lake.root) for f in files)

    con = connect(s3_lake)
    assert con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [
        (n, n)
    ]
    failed = con.execute("SELECT count(*) FROM messages WHERE is_error").fetchall()[0][0]
    assert failed > 0
    assert con.execute("SELECT count(*) > 0 FROM latest_rewards").fetchall() == [(True,)]
    con.close()

    frame = scan(s3_lake, "trajectories").select("trajectory_id", "dt").collect()
    assert frame.height == n and frame["trajectory_id"].n_unique() == n

    results = compact(s3_lake, CompactConfig(tables=("trajectories", "rewards"), retention_hours=0))
    # The re-send replaced rows: the files it rewrote are no longer in the table, and vacuum deletes them.
    assert results[0].files_vacuumed >= 1 and results[0].files_removed == (
        len(files) if len(files) > 1 else 0
    )
    assert len(snapshot(s3_lake)["trajectories"].files) == 1
    con = connect(s3_lake)
    assert con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [
        (n, n)
    ]
    assert con.execute("SELECT count(*) FROM messages WHERE is_error").fetchall() == [(failed,)]


def test_concurrent_writers_on_the_bucket_lose_and_duplicate_nothing(s3_lake: Lake) -> None:
    """delta-rs commits to S3 with conditional writes (If-None-Match), which moto enforces."""
    from concurrent.futures import ThreadPoolExecutor

    def writer(w: int) -> int:
        for batch in range(4):
            rows = [make_traj(w * 100 + batch * 10 + i) for i in range(10)]
            write(s3_lake, "trajectories", rows)
            write(s3_lake, "trajectories", rows[:3])  # a retry: replaces, adds nothing
        return w

    with ThreadPoolExecutor(3) as pool:
        assert sorted(pool.map(writer, range(3))) == [0, 1, 2]
    con = connect(s3_lake)
    assert con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [
        (120, 120)
    ]


def test_bad_rows_write_nothing_to_the_bucket(s3_lake: Lake) -> None:
    with pytest.raises(SchemaViolation):
        write(
            s3_lake,
            "runs",
            [{"run_id": "r", "step": 0, "stage": "sft"}, {"run_id": None, "step": 1, "stage": "sft"}],
        )
    assert s3_lake.fs.find(s3_lake.fs_path()) == []  # not even a table log
