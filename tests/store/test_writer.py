"""The writer: validation errors (each kind), atomicity under kill -9, concurrent writers, layout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import store
from store.schema import TIMESTAMP
from tests.store.helpers import T0, all_files, count, make_traj, visible_files

# --- validation: each kind, exact attributes, nothing written -------------------------


@pytest.mark.parametrize(
    ("table", "data", "column", "row", "reason"),
    [
        # `started_at` is required on trajectories; a batch without the column at all.
        (
            "trajectories",
            pa.table({"trajectory_id": ["a"], "source": ["otel"]}),
            "started_at",
            None,
            "missing_column",
        ),
        # `step` is int64: a string that cannot be cast is a wrong type, at its row.
        (
            "runs",
            pa.table({"run_id": ["r", "r", "r"], "step": ["0", "1", "two"], "stage": ["sft"] * 3}),
            "step",
            2,
            "wrong_type",
        ),
        # list-of-dicts input: the first bad value is named by its row.
        (
            "runs",
            [{"run_id": "r", "step": 1, "stage": "sft"}, {"run_id": "r", "step": "x", "stage": "sft"}],
            "step",
            1,
            "wrong_type",
        ),
        # A null in a key column.
        (
            "trajectories",
            [make_traj(0), make_traj(1, trajectory_id=None)],
            "trajectory_id",
            1,
            "null_key",
        ),
        # A null in a required (non-key) column.
        (
            "runs",
            pa.table({"run_id": ["r", "r"], "step": [0, 1], "stage": ["sft", None]}),
            "stage",
            1,
            "null_value",
        ),
        # A column the schema does not know.
        ("runs", [{"run_id": "r", "step": 0, "stage": "sft", "loss": 1.0}], "loss", None, "unknown_column"),
    ],
    ids=[
        "missing_column",
        "wrong_type_arrow",
        "wrong_type_dicts",
        "null_key",
        "null_value",
        "unknown_column",
    ],
)
def test_schema_violation_names_table_column_row_and_writes_nothing(
    lake: store.Lake, table: str, data: object, column: str, row: int | None, reason: str
) -> None:
    with pytest.raises(store.SchemaViolation) as info:
        store.write(lake, table, data)
    error = info.value
    assert (error.table, error.column, error.row, error.reason) == (table, column, row, reason)
    assert f"`{table}`.`{column}`" in str(error)
    assert "nothing was written" in str(error)
    assert all_files(lake) == []


def test_violation_in_a_later_batch_rolls_back_earlier_batches(lake: store.Lake) -> None:
    good = [make_traj(i) for i in range(10)]
    bad = [make_traj(10, source=None)]
    with pytest.raises(store.SchemaViolation) as info:
        store.write(lake, "trajectories", iter([good, good, bad]), row_group_size=4)
    # Row numbers count across the whole input.
    assert (info.value.column, info.value.row, info.value.reason) == ("source", 20, "null_value")
    assert all_files(lake) == []


def test_safe_casts_are_accepted_and_dt_is_derived(lake: store.Lake) -> None:
    table = pa.table(
        {
            "run_id": pa.array(["r"], pa.large_string()),
            "step": pa.array([3], pa.int32()),
            "stage": ["grpo"],
            "at": pa.array([T0], TIMESTAMP),
        }
    )
    store.write(lake, "runs", table)
    store.write(lake, "trajectories", [make_traj(1, day=2)])
    assert count(lake, "SELECT step FROM runs") == 3
    assert count(lake, "SELECT dt FROM trajectories").isoformat() == "2026-11-22"
    assert [Path(p).parent.name for p in visible_files(lake, "trajectories")] == ["dt=2026-11-22"]


def test_files_are_zstd_and_use_the_schema_types(lake: store.Lake) -> None:
    result = store.write(lake, "trajectories", [make_traj(i) for i in range(5)])
    (path,) = result.files
    meta = pq.ParquetFile(path).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert (
        pq.read_schema(path).field("messages").type
        == store.table_spec("trajectories").file_schema.field("messages").type
    )


# --- atomicity: kill -9 mid-write ------------------------------------------------------

_SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    import store
    from bench.synthetic import synthetic_trajectories

    def slow():
        for i, batch in enumerate(synthetic_trajectories(200_000, seed=1, batch_size=2_000)):
            if i == 3:
                print("writing", flush=True)
            time.sleep(0.05)
            yield batch

    store.write(sys.argv[1], "trajectories", slow(), row_group_size=2_000)
    """
)


def test_writer_killed_mid_write_leaves_no_visible_partial_file(lake: store.Lake, tmp_path: Path) -> None:
    store.write(lake, "trajectories", [make_traj(i) for i in range(3)])  # committed before the crash
    before = visible_files(lake, "trajectories")
    script = tmp_path / "slow_writer.py"
    script.write_text(_SLOW_WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, str(script), lake.root], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"writing"
    deadline = time.monotonic() + 60
    while not any(p.endswith(".tmp") for p in all_files(lake)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # a few more row groups land in the temporaries
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    temps = [p for p in all_files(lake) if p.endswith(".tmp")]
    assert temps, "the writer should have been killed while writing temporaries"
    assert visible_files(lake, "trajectories") == before
    glob = f"{lake.root}/trajectories/**/*.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true)").fetchall() == [
        (3,)
    ]
    assert count(lake, "SELECT count(*) FROM trajectories") == 3

    # Compaction removes temporaries of killed writers once they are old enough.
    from store.compact import remove_stale_temps

    assert remove_stale_temps(lake, "trajectories", older_than_seconds=3600) == 0
    assert remove_stale_temps(lake, "trajectories", older_than_seconds=0) == len(temps)
    assert not [p for p in all_files(lake) if p.endswith(".tmp")]


# --- concurrent writers ----------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    import store
    from tests.store.helpers import make_traj

    worker = int(sys.argv[2])
    for batch in range(10):
        rows = [make_traj(worker * 1000 + batch * 50 + i, day=i % 3) for i in range(50)]
        store.write(sys.argv[1], "trajectories", rows)
        # Re-send one batch, as a retrying client would: must not duplicate rows.
        if batch == 5:
            store.write(sys.argv[1], "trajectories", rows)
    """
)


def test_concurrent_writer_processes_lose_and_duplicate_nothing(lake: store.Lake, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, str(script), lake.root, str(w)], env=env) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert count(lake, "SELECT count(*) FROM trajectories") == 2000
    assert count(lake, "SELECT count(DISTINCT trajectory_id) FROM trajectories") == 2000
    # Every committed row is on disk: 2000 plus the 4 x 50 re-sent ones.
    glob = f"{lake.root}/trajectories/**/*.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true)").fetchall() == [
        (2200,)
    ]
    names = [Path(p).name for p in visible_files(lake, "trajectories")]
    assert len(names) == len(set(names))


def test_threads_writing_at_once_get_distinct_files_and_stamps(lake: store.Lake) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(w: int) -> store.WriteResult:
        return store.write(lake, "runs", [{"run_id": f"w{w}", "step": s, "stage": "sft"} for s in range(100)])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert sum(r.rows for r in results) == 800
    assert count(lake, "SELECT count(DISTINCT _written_at) FROM runs") == 800


def test_bounded_buffers_split_large_inputs_into_row_groups(lake: store.Lake) -> None:
    rows = [{"run_id": "r", "step": s, "stage": "sft", "metrics": "x" * 200} for s in range(5000)]
    result = store.write(lake, "runs", rows, row_group_size=1000, buffer_bytes=100_000)
    (path,) = result.files
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 5000
    assert meta.num_row_groups >= 5
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= 1000


def test_max_rows_per_file_splits_output(lake: store.Lake) -> None:
    result = store.write(
        lake,
        "runs",
        [{"run_id": "r", "step": s, "stage": "sft"} for s in range(250)],
        row_group_size=100,
        max_rows_per_file=100,
    )
    assert len(result.files) == 3
    assert count(lake, "SELECT count(*) FROM runs") == 250
