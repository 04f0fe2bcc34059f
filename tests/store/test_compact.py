"""Compaction: merging, dropping superseded rows, grace-period reclaim, racing readers and writers."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import store
from store.compact import CompactConfig, compact, pending_files, reclaim
from store.errors import LakeBusy
from store.layout import compact_generation
from tests.store.helpers import count, make_traj, visible_files

NOW = CompactConfig(grace_seconds=0)


def _plain_count(lake: store.Lake, table: str) -> int:
    glob = f"{lake.root}/{table}/**/*.parquet"
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true)").fetchall()[0][0]


def test_compaction_merges_each_partition_into_one_file_and_keeps_rows(lake: store.Lake) -> None:
    for batch in range(5):
        store.write(lake, "trajectories", [make_traj(batch * 10 + i, day=i % 2) for i in range(10)])
    store.write(lake, "trajectories", [make_traj(i, model="m2", day=i % 2) for i in range(5)])  # updates
    before = store.connect(lake).execute("SELECT * FROM trajectories ORDER BY trajectory_id").fetchall()
    assert len(visible_files(lake, "trajectories")) == 12

    (result,) = compact(lake, ["trajectories"], config=NOW)

    assert (result.partitions, result.files_in, result.files_out) == (2, 12, 2)
    assert (result.rows_in, result.rows_out, result.deleted) == (55, 50, 12)
    files = visible_files(lake, "trajectories")
    assert [Path(f).parent.name for f in files] == ["dt=2026-11-20", "dt=2026-11-21"]
    assert all(compact_generation(Path(f).name) is not None for f in files)
    # Same rows, same `_written_at` (preserved), superseded versions gone from disk.
    assert (
        store.connect(lake).execute("SELECT * FROM trajectories ORDER BY trajectory_id").fetchall() == before
    )
    assert _plain_count(lake, "trajectories") == 50
    assert count(lake, "SELECT count(*) FROM trajectories WHERE model = 'm2'") == 5


def test_newest_row_wins_across_compacted_and_new_files(lake: store.Lake) -> None:
    store.write(lake, "trajectories", [make_traj(i) for i in range(4)])
    compact(lake, ["trajectories"], config=NOW)
    store.write(lake, "trajectories", [make_traj(1, model="newer")])
    con = store.connect(lake)
    assert con.execute("SELECT trajectory_id, model FROM trajectories ORDER BY 1").fetchall() == [
        ("t0", "m1"),
        ("t1", "newer"),
        ("t2", "m1"),
        ("t3", "m1"),
    ]
    # An older row committed late (a slow writer stamped it first) must not win.
    oldest = count(lake, "SELECT min(_written_at) FROM trajectories") - timedelta(seconds=1)
    store.write(lake, "trajectories", [make_traj(2, model="stale", _written_at=oldest)], stamp=False)
    assert count(lake, "SELECT model FROM trajectories WHERE trajectory_id = 't2'") == "m1"
    assert store.scan(lake, "trajectories").collect().height == 4
    compact(lake, ["trajectories"], config=NOW)
    assert count(lake, "SELECT model FROM trajectories WHERE trajectory_id = 't2'") == "m1"
    assert count(lake, "SELECT model FROM trajectories WHERE trajectory_id = 't1'") == "newer"
    assert _plain_count(lake, "trajectories") == 4


def test_a_key_that_moved_partition_is_dropped_from_its_old_compacted_file(lake: store.Lake) -> None:
    store.write(lake, "trajectories", [make_traj(i, day=0) for i in range(3)])
    compact(lake, ["trajectories"], config=NOW)
    store.write(lake, "trajectories", [make_traj(0, day=1, model="moved")])  # started_at corrected
    (result,) = compact(lake, ["trajectories"], config=NOW)
    assert result.partitions == 2  # the new day, and the old day's file that held the stale row
    assert _plain_count(lake, "trajectories") == 3
    con = store.connect(lake)
    assert con.execute(
        "SELECT dt::VARCHAR, model FROM trajectories WHERE trajectory_id = 't0'"
    ).fetchall() == [("2026-11-21", "moved")]


def test_replaced_files_stay_until_the_grace_period_ends(lake: store.Lake) -> None:
    for i in range(3):
        store.write(lake, "runs", [{"run_id": "r", "step": i, "stage": "sft"}])
    inputs = visible_files(lake, "runs")
    (result,) = compact(lake, ["runs"], config=CompactConfig(grace_seconds=3600))
    assert result.deleted == 0
    assert set(inputs) <= set(visible_files(lake, "runs"))  # still there for running queries
    assert pending_files(lake, "runs") == set(inputs)
    # Readers see each row once while the copies coexist; a second pass does not re-merge them.
    assert count(lake, "SELECT count(*) FROM runs") == 3
    (again,) = compact(lake, ["runs"], config=CompactConfig(grace_seconds=3600))
    assert again.partitions == 0
    assert reclaim(lake, "runs", grace_seconds=3600) == 0
    assert reclaim(lake, "runs", grace_seconds=0) == 3
    assert [Path(f).name.startswith("compact-") for f in visible_files(lake, "runs")] == [True]
    assert count(lake, "SELECT count(*) FROM runs") == 3


def test_stale_temporaries_are_removed_fresh_ones_kept(lake: store.Lake) -> None:
    store.write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    directory = Path(lake.root) / "runs"
    stale, fresh = directory / ".part-1-dead.parquet.tmp", directory / ".part-2-live.parquet.tmp"
    stale.write_bytes(b"half a file")
    fresh.write_bytes(b"being written")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    (result,) = compact(lake, ["runs"], config=NOW)
    assert result.temps_removed == 1
    assert not stale.exists() and fresh.exists()


def test_one_compaction_per_table_at_a_time(lake: store.Lake) -> None:
    from store.compact import _table_lock

    store.write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    with _table_lock(lake, "runs"), pytest.raises(LakeBusy, match="compaction of `runs`"):
        compact(lake, ["runs"])


def test_unknown_table_is_rejected_before_any_work(lake: store.Lake) -> None:
    with pytest.raises(KeyError, match="unknown table `trajectory`"):
        compact(lake, ["trajectory"])


def test_old_schema_files_compact_with_nulls_for_new_columns(lake: store.Lake) -> None:
    import pyarrow as pa

    (Path(lake.root) / "runs").mkdir(parents=True)
    old = pa.table({"run_id": ["old"], "step": pa.array([1], pa.int64()), "stage": ["sft"]})
    pq.write_table(old, Path(lake.root) / "runs" / "part-00000000000000000001-0123456789abcdef.parquet")
    store.write(lake, "runs", [{"run_id": "new", "step": 1, "stage": "grpo", "metrics": "{}"}])
    assert store.connect(lake).execute("SELECT run_id, metrics FROM runs ORDER BY 1").fetchall() == [
        ("new", "{}"),
        ("old", None),
    ]
    compact(lake, ["runs"], config=NOW)
    assert store.connect(lake).execute("SELECT run_id, metrics FROM runs ORDER BY 1").fetchall() == [
        ("new", "{}"),
        ("old", None),
    ]


# --- racing ------------------------------------------------------------------------------


def test_compaction_racing_readers_and_writers_keeps_counts_exact(lake: store.Lake) -> None:
    """Writers append new keys and rewrite old ones while compaction runs in a loop; every
    read sees each key exactly once, never fewer keys than a read before it."""
    n_batches, per_batch = 30, 20
    store.write(lake, "trajectories", [make_traj(i, day=i % 3) for i in range(per_batch)])
    committed = [per_batch]  # keys known committed (a lower bound for any later read)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for b in range(1, n_batches):
                rows = [make_traj(b * per_batch + i, day=i % 3) for i in range(per_batch)]
                # Also rewrite some existing keys (newer versions of old rows).
                rows += [make_traj(i, model=f"v{b}", day=i % 3) for i in range(0, b * per_batch, 7)][:10]
                store.write(lake, "trajectories", rows)
                committed.append((b + 1) * per_batch)
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def compactor() -> None:
        try:
            while not stop.is_set():
                compact(lake, ["trajectories"], config=CompactConfig(grace_seconds=5, threads=1))
        except BaseException as exc:
            errors.append(exc)

    seen: list[tuple[int, int, int]] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                floor = committed[-1]
                con = store.connect(lake, threads=1)
                total, distinct = con.execute(
                    "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories"
                ).fetchall()[0]
                con.close()
                seen.append((floor, total, distinct))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (writer, compactor, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(seen) > 5
    for floor, total, distinct in seen:
        assert total == distinct, "a key was duplicated"
        assert total >= floor, "a committed key was lost"
    compact(lake, ["trajectories"], config=NOW)
    total = n_batches * per_batch
    assert count(lake, "SELECT count(*) FROM trajectories") == total
    assert count(lake, "SELECT count(DISTINCT trajectory_id) FROM trajectories") == total
    assert _plain_count(lake, "trajectories") == total
    # The last rewrite of t0 won.
    assert count(lake, "SELECT model FROM trajectories WHERE trajectory_id = 't0'") == f"v{n_batches - 1}"
