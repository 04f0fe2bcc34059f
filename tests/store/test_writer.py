"""The writer: validation errors (each kind), one row per key, atomic commits under kill -9, concurrent writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.errors import SchemaViolation
from store.lake import Lake
from store.rows import utc_now
from store.schema import TABLES, TIMESTAMP, table_spec
from store.writer import WriteResult, write
from tests.store.helpers import T0, count, make_traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

REPO = Path(__file__).resolve().parents[2]

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
        ("trajectories", [make_traj(0), make_traj(1, trajectory_id=None)], "trajectory_id", 1, "null_key"),
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
    lake: Lake, table: str, data: object, column: str, row: int | None, reason: str
) -> None:
    with pytest.raises(SchemaViolation) as info:
        write(lake, table, data)
    error = info.value
    assert (error.table, error.column, error.row, error.reason) == (table, column, row, reason)
    assert f"`{table}`.`{column}`" in str(error)
    assert "nothing was written" in str(error)
    assert not lake.has_table(table)  # not even created


def test_violation_in_a_later_batch_rolls_back_earlier_batches(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(100)])
    before = snapshot(lake)["trajectories"].version
    good = [make_traj(i) for i in range(10)]
    bad = [make_traj(10, source=None)]
    with pytest.raises(SchemaViolation) as info:
        write(lake, "trajectories", iter([good, good, bad]), batch_rows=4)
    # Row numbers count across the whole input.
    assert (info.value.column, info.value.row, info.value.reason) == ("source", 20, "null_value")
    assert snapshot(lake)["trajectories"].version == before  # no commit
    assert count(lake, "SELECT count(*) FROM trajectories") == 1


def test_safe_casts_are_accepted_and_dt_is_derived(lake: Lake) -> None:
    table = pa.table(
        {
            "run_id": pa.array(["r"], pa.large_string()),
            "step": pa.array([3], pa.int32()),
            "stage": ["grpo"],
            "at": pa.array([T0], TIMESTAMP),
        }
    )
    write(lake, "runs", table)
    write(lake, "trajectories", [make_traj(1, day=2)])
    assert count(lake, "SELECT step FROM runs") == 3
    assert count(lake, "SELECT dt FROM trajectories").isoformat() == "2026-11-22"
    (path,) = snapshot(lake)["trajectories"].files
    assert Path(path).parent.name == "dt=2026-11-22"  # Delta's partition directories are hive-style


def test_files_are_zstd_with_a_bloom_filter_on_the_key(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(i) for i in range(5)])
    (path,) = snapshot(lake)["trajectories"].files
    meta = pq.ParquetFile(path).metadata
    names = [meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)]
    key = meta.row_group(0).column(names.index("trajectory_id"))
    assert key.compression == "ZSTD"
    assert key.to_dict().get("bloom_filter_offset") is not None
    written = pq.read_schema(path).field("messages").type  # delta-rs writes Arrow string views
    assert str(written).replace("string_view", "string").replace("element", "item") == str(
        table_spec("trajectories").schema.field("messages").type
    )


# --- one row per key ----------------------------------------------------------------------


def test_upsert_replaces_the_row_and_every_delta_reader_sees_one(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    result = write(lake, "trajectories", [make_traj(1, model="newer"), make_traj(3)])
    assert (result.inserted, result.updated) == (1, 1)
    plain = DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table(columns=["trajectory_id", "model"])
    assert sorted(plain.to_pylist(), key=lambda r: r["trajectory_id"]) == [
        {"trajectory_id": "t0", "model": "m1"},
        {"trajectory_id": "t1", "model": "newer"},
        {"trajectory_id": "t2", "model": "m1"},
        {"trajectory_id": "t3", "model": "m1"},
    ]


def test_a_row_never_replaces_a_newer_one_of_its_key(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(0, model="new")])
    old = utc_now().replace(year=2020)
    write(lake, "trajectories", [make_traj(0, model="stale", _written_at=old)])  # a late, older row
    assert count(lake, "SELECT model FROM trajectories") == "new"


def test_spans_keep_the_first_delivery_and_a_repeated_key_in_one_write_keeps_its_last_row(
    lake: Lake,
) -> None:
    span = {"trace_id": "a" * 32, "span_id": "b" * 16, "source": "otel", "start_time": T0, "name": "first"}
    write(lake, "spans", [span])
    retried = write(lake, "spans", [{**span, "name": "retry"}])
    assert (retried.inserted, retried.updated) == (0, 0)
    assert count(lake, "SELECT name FROM spans") == "first"
    result = write(lake, "runs", [{"run_id": "r", "step": 0, "stage": s} for s in ("sft", "grpo")])
    assert result.rows == 1 and count(lake, "SELECT stage FROM runs") == "grpo"


def test_a_row_moving_partition_leaves_none_behind(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(0, day=1)])
    write(lake, "trajectories", [make_traj(0, day=0)])  # an earlier span arrived: started earlier
    assert count(lake, "SELECT count(*) FROM trajectories") == 1
    assert count(lake, "SELECT dt FROM trajectories") == date(2026, 11, 20)
    # A caller that knows where the old row is says so; the answer is the same.
    write(lake, "trajectories", [make_traj(0, day=2)], within=[date(2026, 11, 20)])
    assert count(lake, "SELECT count(*) FROM trajectories") == 1


def test_a_column_added_to_the_schema_is_added_to_the_table(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    spec = table_spec("runs")
    wider = spec.schema.insert(len(spec.schema) - 1, pa.field("note", pa.string()))
    from dataclasses import replace

    monkeypatch.setitem(TABLES, "runs", replace(spec, schema=wider))
    write(lake, "runs", [{"run_id": "r", "step": 1, "stage": "sft", "note": "added"}])
    con = connect(lake)
    assert con.execute("SELECT step, note FROM runs ORDER BY step").fetchall() == [(0, None), (1, "added")]


# --- atomicity: kill -9 mid-write ------------------------------------------------------

_SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    from store.writer import write
    from bench.synthetic import synthetic_trajectories

    def slow():
        for i, batch in enumerate(synthetic_trajectories(200_000, seed=1, batch_size=2_000)):
            if i == 3:
                print("writing", flush=True)
            time.sleep(0.05)
            yield batch

    write(sys.argv[1], "trajectories", slow(), batch_rows=2_000)
    """
)


def test_writer_killed_mid_write_commits_nothing(lake: Lake, tmp_path: Path) -> None:
    write(lake, "trajectories", [make_traj(i) for i in range(3)])  # committed before the crash
    before = snapshot(lake)["trajectories"]
    script = tmp_path / "slow_writer.py"
    script.write_text(_SLOW_WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), lake.root],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"writing"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    after = snapshot(lake)["trajectories"]
    assert (after.version, after.files) == (before.version, before.files)
    assert DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table().num_rows == 3


# --- concurrent writers ----------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from store.writer import write
    from tests.store.helpers import make_traj

    worker = int(sys.argv[2])
    for batch in range(6):
        rows = [make_traj(worker * 1000 + batch * 50 + i, day=i % 3) for i in range(50)]
        write(sys.argv[1], "trajectories", rows)
        # Re-send one batch, as a retrying client would: must not duplicate rows.
        if batch == 3:
            write(sys.argv[1], "trajectories", rows)
    """
)


def test_concurrent_writer_processes_lose_and_duplicate_nothing(lake: Lake, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(script), lake.root, str(w)], env=env) for w in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    plain = DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table(columns=["trajectory_id"])
    assert plain.num_rows == len(set(plain.column("trajectory_id").to_pylist())) == 900


def test_threads_writing_at_once_all_commit(lake: Lake) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(w: int) -> WriteResult:
        return write(lake, "runs", [{"run_id": f"w{w}", "step": s, "stage": "sft"} for s in range(100)])

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(6)))
    assert sum(r.inserted for r in results) == 600
    versions = sorted(r.version for r in results)
    # One commit each, none lost, after the table's one creation (threads create it one at a time).
    assert versions == list(range(versions[0], versions[0] + 6))
    assert count(lake, "SELECT count(*) FROM runs") == 600


def test_durable_writes_reach_the_disk_before_returning(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    result = write(
        lake,
        "spans",
        [{"trace_id": "a" * 32, "span_id": "b" * 16, "source": "otel", "start_time": T0}],
        durable=True,
    )
    assert any(p.endswith(f"{result.version:020d}.json") for p in synced)  # the commit's log entry
    assert any(p.endswith(".parquet") for p in synced)  # and the file it added
