"""A lake on an S3-compatible object store: a real moto server on loopback, s3fs, DuckDB, polars."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import store
from bench.synthetic import synthetic_rewards, synthetic_trajectories
from store.compact import CompactConfig, compact

moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_lake(endpoint: str, request: pytest.FixtureRequest) -> store.Lake:
    import boto3

    bucket = f"lake-{request.node.name.replace('_', '-')[:40].lower()}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    options = {
        "key": "test",
        "secret": "test",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    return store.Lake(f"s3://{bucket}/lake", storage_options=options)


def test_write_query_scan_compact_round_trip(s3_lake: store.Lake) -> None:
    n = 300
    store.write(s3_lake, "trajectories", synthetic_trajectories(n, seed=3, batch_size=100, days=1))
    store.write(
        s3_lake, "trajectories", next(synthetic_trajectories(50, seed=3, days=1))
    )  # re-sent: duplicates on disk
    store.write(s3_lake, "rewards", synthetic_rewards(n, seed=3, days=1))
    files = s3_lake.data_files("trajectories")
    assert files and all(f.startswith(s3_lake.root.removeprefix("s3://")) for f in files)

    con = store.connect(s3_lake)
    assert con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [
        (n, n)
    ]
    failed = con.execute("SELECT count(*) FROM messages WHERE is_error").fetchall()[0][0]
    assert failed > 0
    assert con.execute("SELECT count(*) > 0 FROM latest_rewards").fetchall() == [(True,)]
    con.close()

    frame = store.scan(s3_lake, "trajectories").select("trajectory_id", "dt").collect()
    assert frame.height == n and frame["trajectory_id"].n_unique() == n

    results = compact(s3_lake, ["trajectories", "rewards"], config=CompactConfig(grace_seconds=0))
    assert results[0].rows_out == n and results[0].deleted == results[0].files_in
    assert all(f.rsplit("/", 1)[1].startswith("compact-") for f in s3_lake.data_files("trajectories"))
    con = store.connect(s3_lake)
    assert con.execute("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [
        (n, n)
    ]
    assert con.execute("SELECT count(*) FROM messages WHERE is_error").fetchall() == [(failed,)]


def test_bad_rows_write_nothing_to_the_bucket(s3_lake: store.Lake) -> None:
    with pytest.raises(store.SchemaViolation):
        store.write(
            s3_lake,
            "runs",
            [{"run_id": "r", "step": 0, "stage": "sft"}, {"run_id": None, "step": 1, "stage": "sft"}],
        )
    assert s3_lake.fs.find(s3_lake.fs_path()) == []
