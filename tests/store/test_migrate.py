"""`trajlake migrate`: a lake in the Parquet-files layout of the previous release becomes Delta tables.

The old lake is written the way that release wrote it: zstd Parquet files named
`part-<ns>-<hex>.parquet` under hive `dt=` folders (no `dt` column in the files), keys
repeating across files with the newest `_written_at` (nanoseconds) current, a compacted
`compact-<generation>-<hex>.parquet` beside the part files it replaced during its grace
period, and the compaction bookkeeping folder.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.migrate import LEGACY_FILE, current_rows, legacy_files, migrate
from store.schema import table_spec
from store.writer import write
from tests.store.helpers import T0

NS = pa.timestamp("ns", tz="UTC")


def old_file(
    lake: Lake, table: str, rows: list[dict], *, day: str | None = None, compacted: int | None = None
) -> Path:
    """One file exactly as the Parquet-files release named and laid it out."""
    folder = Path(lake.root) / table / (f"dt={day}" if day else "")
    folder.mkdir(parents=True, exist_ok=True)
    name = (
        f"compact-{compacted:020d}-{uuid.uuid4().hex[:16]}.parquet"
        if compacted is not None
        else f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:16]}.parquet"
    )
    spec = table_spec(table)
    schema = pa.schema(
        [f if f.name != "_written_at" else pa.field("_written_at", NS) for f in spec.schema if f.name != "dt"]
    )
    present = [f for f in schema if any(f.name in r for r in rows)]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(present)), folder / name, compression="zstd")
    return folder / name


def traj(i: int, model: str, written: int) -> dict:
    return {
        "trajectory_id": f"t{i}",
        "source": "otel",
        "model": model,
        "started_at": T0,
        "messages": [{"role": "user", "content": f"q{i}"}],
        "_written_at": T0 + timedelta(seconds=written),
    }


def test_migrate_keeps_the_newest_row_per_key_and_moves_the_old_files(lake: Lake) -> None:
    day = T0.date().isoformat()
    old_file(lake, "trajectories", [traj(0, "a", 1), traj(1, "a", 1)], day=day)
    old_file(lake, "trajectories", [traj(0, "b", 2), traj(2, "b", 2)], day=day)  # t0 re-assembled later
    old_file(lake, "trajectories", [traj(0, "b", 2), traj(1, "a", 1), traj(2, "b", 2)], day=day, compacted=1)
    reward = {
        "trajectory_id": "t0",
        "name": "r",
        "scorer": "s",
        "value": 1.0,
        "scored_at": T0,
        "status": "ok",
    }
    old_file(lake, "rewards", [{**reward, "value": 0.0, "_written_at": T0}], day=day)
    old_file(lake, "rewards", [{**reward, "_written_at": T0 + timedelta(seconds=5)}], day=day)  # re-scored
    old_file(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft", "_written_at": T0}])
    (Path(lake.root) / "_compaction" / "trajectories").mkdir(parents=True)

    result = CliRunner().invoke(app, ["migrate", "--lake", lake.root])
    assert result.exit_code == 0, result.output

    plain = DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table(columns=["trajectory_id", "model"])
    assert sorted((r["trajectory_id"], r["model"]) for r in plain.to_pylist()) == [
        ("t0", "b"),
        ("t1", "a"),
        ("t2", "b"),
    ]
    con = connect(lake)
    assert con.execute("SELECT value FROM rewards").fetchall() == [(1.0,)]
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
    assert con.execute("SELECT _written_at FROM trajectories WHERE trajectory_id = 't0'").fetchall() == [
        (T0 + timedelta(seconds=2),)  # the old stamps are kept
    ]
    legacy = sorted(p.name for p in (Path(lake.root) / "_legacy").rglob("*.parquet"))
    left = [p for p in (Path(lake.root) / "trajectories").rglob("*.parquet") if LEGACY_FILE.match(p.name)]
    assert len(legacy) == 6 and not left
    assert (Path(lake.root) / "_legacy" / "_compaction").is_dir() and not (
        Path(lake.root) / "_compaction"
    ).exists()

    # A second run has nothing left to do, and newer rows written since are not touched.
    write(lake, "trajectories", [{**traj(1, "newest", 0), "_written_at": None}])
    again = CliRunner().invoke(app, ["migrate", "--lake", lake.root])
    assert again.exit_code == 0 and connect(lake).execute(
        "SELECT model FROM trajectories WHERE trajectory_id = 't1'"
    ).fetchall() == [("newest",)]


def test_a_rerun_after_a_crash_between_commit_and_move_changes_nothing_newer(lake: Lake) -> None:
    day = T0.date().isoformat()
    old_file(lake, "trajectories", [traj(0, "old", 1)], day=day)
    # The crash: the rows were committed, the old files not yet moved.
    rows_read, rows = current_rows(lake, table_spec("trajectories"), legacy_files(lake, "trajectories"))
    write(lake, "trajectories", rows)
    write(lake, "trajectories", [{**traj(0, "new", 0), "_written_at": None}])  # the collector moved on
    (outcome,) = [m for m in migrate(lake) if m.table == "trajectories"]
    assert rows_read == 1 and outcome.files == 1
    assert connect(lake).execute("SELECT model FROM trajectories").fetchall() == [("new",)]
