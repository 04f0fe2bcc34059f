"""`compact`: Delta OPTIMIZE (Z-ordered) + VACUUM, safe beside writers and readers, keeping lineage versions."""

from __future__ import annotations

import threading
import time

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.rows import utc_now
from store.writer import write
from tests.store.helpers import count, make_traj


def test_compaction_rewrites_each_crowded_partition_and_keeps_rows(lake: Lake) -> None:
    for day in range(2):
        for batch in range(3):  # three commits per partition: three files each
            write(lake, "trajectories", [make_traj(day * 100 + batch * 10 + i, day=day) for i in range(5)])
    write(lake, "trajectories", [make_traj(0, model="newer")])
    before = snapshot(lake)["trajectories"]
    (result,) = compact(lake, CompactConfig(tables=("trajectories",), retention_hours=0))
    after = snapshot(lake)["trajectories"]
    assert result.partitions == 2 and result.files_added == 2 and result.files_removed == len(before.files)
    assert len(after.files) == 2 and result.files_vacuumed >= result.files_removed
    assert count(lake, "SELECT count(*) FROM trajectories") == 30
    assert count(lake, "SELECT model FROM trajectories WHERE trajectory_id = 't0'") == "newer"
    # Clustered: within the rewritten file, rows follow the Z-order of trajectory_id (here: sorted).
    ids = DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table(
        columns=["trajectory_id"], partitions=[("dt", "=", "2026-11-20")]
    )
    assert len(ids) == 15


def _encodings(path: str, column: str) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    paths = [meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)]
    return set(meta.row_group(0).column(paths.index(column)).encodings)


def test_compacted_files_are_laid_out_for_reading(lake: Lake) -> None:
    # Writes (the collector's hot path) skip dictionaries on message fields; the files
    # `compact` writes once for every later query dictionary-encode them, ids excepted.
    for batch in range(2):
        write(lake, "trajectories", [make_traj(batch * 10 + i) for i in range(5)])
    role = "messages.list.element.role"
    written = snapshot(lake)["trajectories"].files
    assert all("RLE_DICTIONARY" not in _encodings(path, role) for path in written)
    compact(lake, CompactConfig(tables=("trajectories",), retention_hours=0))
    (compacted,) = snapshot(lake)["trajectories"].files
    assert "RLE_DICTIONARY" in _encodings(compacted, role)
    assert "RLE_DICTIONARY" not in _encodings(compacted, "trajectory_id")


def test_vacuum_keeps_what_the_retention_and_lineage_need(lake: Lake) -> None:
    write(
        lake,
        "rewards",
        [{"trajectory_id": "t", "name": "r", "scorer": "s", "value": 0.0, "scored_at": utc_now()}],
    )
    trained_on = snapshot(lake)["rewards"].version
    write(
        lake,
        "rewards",
        [{"trajectory_id": "t", "name": "r", "scorer": "s", "value": 1.0, "scored_at": utc_now()}],
    )
    write(
        lake,
        "rewards",
        [{"trajectory_id": "u", "name": "r", "scorer": "s", "value": 1.0, "scored_at": utc_now()}],
    )

    compact(lake, CompactConfig(tables=("rewards",)))  # default retention: nothing vacuumed yet
    assert connect(lake, snapshot=snapshot(lake, {"rewards": trained_on})).execute(
        "SELECT value FROM rewards"
    ).fetchall() == [(0.0,)]

    # Retention 0, but an adapter was trained on `trained_on`: that version stays readable ...
    compact(
        lake, CompactConfig(tables=("rewards",), retention_hours=0), keep_versions={"rewards": [trained_on]}
    )
    old = snapshot(lake, {"rewards": trained_on})
    assert connect(lake, snapshot=old).execute("SELECT value FROM rewards").fetchall() == [(0.0,)]
    # ... and the version just before the last write, which nothing keeps, is gone.
    compact(
        lake, CompactConfig(tables=("rewards",), retention_hours=0), keep_versions={"rewards": [trained_on]}
    )
    later = snapshot(lake, {"rewards": trained_on + 1})
    with pytest.raises(Exception, match=r"(?i)no files found|not found|no such file"):
        connect(lake, snapshot=later).execute("SELECT * FROM rewards").fetchall()


def test_unknown_table_is_rejected_before_any_work(lake: Lake) -> None:
    with pytest.raises(ValueError, match="unknown table `nope`"):
        CompactConfig(tables=("nope",))


def test_compaction_beside_writers_and_readers_keeps_counts_exact(lake: Lake) -> None:
    """Writers commit and a reader counts through the views in a loop while compaction runs:
    the count never dips, never doubles, and ends exact."""
    write(lake, "trajectories", [make_traj(i, day=i % 2) for i in range(40)])
    stop = threading.Event()
    written = [40]
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def writer() -> None:
        n = 1000
        while not stop.is_set():
            try:
                write(lake, "trajectories", [make_traj(n + i, day=i % 2) for i in range(5)])
                write(lake, "trajectories", [make_traj(n, model="again")])  # an upsert too
                written[0] += 5
                n += 5
            except BaseException as exc:  # surfaced below
                errors.append(exc)
                return

    def reader() -> None:
        while not stop.is_set():
            before = written[0]
            con = connect(lake)
            total, distinct = con.execute(
                "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories"
            ).fetchall()[0]
            con.close()
            seen.append((total, distinct))
            if not (before <= total == distinct):
                errors.append(AssertionError(f"read {total} rows ({distinct} distinct), {before}+ committed"))
                return

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    rounds = 0
    while time.monotonic() < deadline and (rounds < 3 or len(seen) < 10) and not errors:
        compact(lake, CompactConfig(tables=("trajectories",), min_files=2))
        rounds += 1
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors[0]
    assert rounds >= 3 and len(seen) >= 10
    assert count(lake, "SELECT count(*) FROM trajectories") == written[0]
