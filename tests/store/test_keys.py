"""The key index (`store.keys`): new keys are appended, held keys merged in just the files that hold
them, and neither hash collisions, compaction nor concurrent writers of the same keys break one row
per key."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable

from store import keys as store_keys
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.writer import write
from tests.store.helpers import T0, make_traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

REPO = Path(__file__).resolve().parents[2]


def span(i: int, *, name: str = "first", received_minutes: float = 0.0) -> dict[str, object]:
    return {
        "trace_id": f"{i:032x}",
        "span_id": f"{i:016x}",
        "source": "otel",
        "start_time": T0,
        "name": name,
        "received_at": T0 + timedelta(minutes=received_minutes),
    }


def last_commit(lake: Lake, table: str) -> dict[str, object]:
    return DeltaTable(lake.table_uri(table)).history(1)[0]


def plain_rows(lake: Lake, table: str, *columns: str) -> list[tuple[object, ...]]:
    plain = DeltaTable(lake.table_uri(table)).to_pyarrow_table(columns=list(columns))
    return sorted(zip(*(plain.column(c).to_pylist() for c in columns), strict=True))


def test_new_keys_append_and_held_keys_merge_only_the_files_holding_them(lake: Lake) -> None:
    for batch in range(6):
        result = write(lake, "trajectories", [make_traj(batch * 10 + i) for i in range(10)])
        assert result.inserted == 10
        assert last_commit(lake, "trajectories")["operation"] == "WRITE"  # an append, no MERGE scan
    write(lake, "trajectories", [make_traj(23, model="rescored"), make_traj(99)])
    merge = last_commit(lake, "trajectories")
    assert merge["operation"] == "MERGE"
    metrics = merge["operationMetrics"]
    assert metrics["num_target_files_scanned"] == 1  # the file of t23, of six
    assert metrics["num_target_files_skipped_during_scan"] == 5
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (1, 1)
    rows = dict(plain_rows(lake, "trajectories", "trajectory_id", "model"))
    assert len(rows) == 61 and rows["t23"] == "rescored"


def test_a_hash_match_is_only_a_candidate(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every key hashes alike: every write looks like it may hold every key, and the MERGE
    # that follows must still tell the keys apart.
    monkeypatch.setattr(store_keys, "key_hashes", lambda keys: np.zeros(keys.num_rows, np.uint64))
    monkeypatch.setattr("store.spill.key_hashes", store_keys.key_hashes)
    write(lake, "spans", [span(i) for i in range(5)])
    write(lake, "spans", [span(i, name="retry") for i in range(3, 8)])
    assert last_commit(lake, "spans")["operation"] == "MERGE"
    names = dict(((t, n) for t, n in plain_rows(lake, "spans", "trace_id", "name")))
    assert len(names) == 8
    assert [names[f"{i:032x}"] for i in range(8)] == ["first"] * 5 + ["retry"] * 3


def test_after_compaction_and_vacuum_an_upsert_still_finds_its_row(lake: Lake) -> None:
    for batch in range(4):
        write(lake, "trajectories", [make_traj(batch * 5 + i) for i in range(5)])
    write(lake, "trajectories", [make_traj(0)])  # the index now knows every file
    compact(lake, CompactConfig(tables=("trajectories",), min_files=2, retention_hours=0))
    write(lake, "trajectories", [make_traj(7, model="after"), make_traj(12, model="after")])
    rows = plain_rows(lake, "trajectories", "trajectory_id", "model")
    assert len(rows) == 20
    assert dict(rows)["t7"] == dict(rows)["t12"] == "after"


def test_a_redelivered_span_in_the_window_is_kept_once_and_an_upsert_replaces_any_age(
    lake: Lake,
) -> None:
    write(lake, "spans", [span(1)])
    late = store_keys.REDELIVERY_WINDOW.total_seconds() / 60 - 1
    write(lake, "spans", [span(1, name="retry", received_minutes=late)])
    assert plain_rows(lake, "spans", "name") == [("first",)]
    write(lake, "spans", [span(1, name="pulled again", received_minutes=600)], upsert=True)
    assert plain_rows(lake, "spans", "name") == [("pulled again",)]


_SAME_KEYS = textwrap.dedent(
    """
    import sys
    import time
    from datetime import datetime, UTC
    from store.writer import write

    worker, start = int(sys.argv[2]), float(sys.argv[3])
    t0 = datetime(2026, 11, 20, 12, tzinfo=UTC)
    write(sys.argv[1], "runs", [{"run_id": f"warm{worker}", "step": 0, "stage": "sft"}])
    time.sleep(max(0.0, start - time.time()))  # every worker starts writing spans at once
    for batch in range(8):
        # Every worker delivers the same spans (a client retrying against another collector),
        # plus spans of its own.
        shared = [f"{batch * 100 + i:032x}" for i in range(40)]
        own = [f"{(worker + 1) * 100_000 + batch * 100 + i:032x}" for i in range(10)]
        rows = [
            {"trace_id": t, "span_id": "1" * 16, "source": "otel", "start_time": t0, "received_at": t0}
            for t in shared + own
        ]
        write(sys.argv[1], "spans", rows)
    """
)


def test_processes_appending_the_same_new_keys_at_once_keep_one_row_each(lake: Lake, tmp_path: Path) -> None:
    script = tmp_path / "same_keys.py"
    script.write_text(_SAME_KEYS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = str(time.time() + 8)
    procs = [
        subprocess.Popen([sys.executable, str(script), lake.root, str(w), start], env=env) for w in range(3)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    keys = plain_rows(lake, "spans", "trace_id", "span_id")
    assert len(keys) == len(set(keys)) == 8 * 40 + 3 * 8 * 10


def test_the_process_keeps_the_key_indexes_of_the_tables_it_wrote_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_keys, "MAX_INDEXES", 2, raising=False)
    monkeypatch.setattr(store_keys, "_INDEXES", type(store_keys._INDEXES)())
    a, b, c = (Lake(str(tmp_path / name)) for name in "abc")
    for lake in (a, b, c):  # a table's first write looks in no file: no index yet
        write(lake, "trajectories", [make_traj(1)])
    assert not store_keys._INDEXES
    for lake in (a, b, a, c):  # `a` written again after `b`: `b` is the least recently used
        write(lake, "trajectories", [make_traj(2)])
    assert list(store_keys._INDEXES) == [(a.root, "trajectories"), (c.root, "trajectories")]
    # a dropped index is read again: an upsert into `b` still replaces its row
    assert write(b, "trajectories", [make_traj(1, model="rescored")]).inserted == 0
    assert plain_rows(b, "trajectories", "trajectory_id", "model") == [("t1", "rescored"), ("t2", "m1")]
    assert len(store_keys._INDEXES) == 2 and (b.root, "trajectories") in store_keys._INDEXES
