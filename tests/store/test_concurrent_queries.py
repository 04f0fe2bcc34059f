"""Queries from several threads at once over the lake's views all finish.

A filtered scan once reached DuckDB through a Python generator that pyarrow ran on a thread of
its IO pool while the generator's own file reads needed that pool too: with pyarrow's default
of 8 IO threads, 4 threads each joining two views hung for good (the pipeline's parallel
scoring tasks did, in CI). The views are plain Arrow datasets now, read in C++ alone; this
holds with pyarrow's default pool, which `store` leaves as it is.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa

from store.catalog.connection import connect
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from tests.training.helpers import make_trajectory

THREADS = 6
DEFAULT_IO_THREADS = 8  # pyarrow's own default


def test_concurrent_filtered_joins_over_many_files_all_finish(tmp_path: Path) -> None:
    assert pa.io_thread_count() == DEFAULT_IO_THREADS  # importing store resized no pool
    lake = Lake(str(tmp_path / "lake"))
    for f in range(12):  # a file per write: each filtered scan probes every file
        ids = [f"t{f}-{i}" for i in range(20)]
        write(lake, "trajectories", [make_trajectory(t) for t in ids])
        write(
            lake,
            "rewards",
            [
                {"trajectory_id": t, "name": "r", "value": 1.0, "scorer": "s", "scored_at": utc_now()}
                for t in ids
            ],
        )
    answers: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def queries(k: int) -> None:
        try:
            for j in range(10):
                with connect(lake, read_only=True) as con:
                    (point,) = con.execute(
                        "SELECT count(*) FROM trajectories WHERE trajectory_id = ?", [f"t{(j + k) % 12}-3"]
                    ).fetchone()
                    (joined,) = con.execute(
                        "SELECT count(*) FROM trajectories t JOIN latest_rewards r USING (trajectory_id) "
                        "WHERE t.agent_name = 'calc-agent'"
                    ).fetchone()
                answers.append((point, joined))
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=queries, args=(k,), daemon=True) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], "queries hung"
    assert not errors
    assert answers == [(1, 240)] * THREADS * 10
