"""`trajlake sql` exits as it should, every time, with and without LIMIT, under load.

On a demo's lake the README's first query printed its rows and then aborted at interpreter
exit (`PyGILState_Release ... Python runtime state: finalizing`, exit 134), and the token-data
query hung: DuckDB pulled the views' scans through a Python generator on pyarrow's threads,
and a LIMIT left those threads inside Python while the interpreter shut down. Crashes like
that show only across many fresh processes on a busy machine, so this runs every recipe and
documented query, with and without LIMIT, in fresh processes, several at once, beside busy
loops on every core, on a lake with MERGE-written (`string_view`) files. `bench/sql_stress.py`
runs the same at 50 runs a statement, 8 at a time.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.sql_stress import build_lake, commands_for, statements, stress
from store.catalog.versions import snapshot

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def test_every_documented_query_exits_cleanly_in_fresh_processes_under_load(tmp_path: Path) -> None:
    lake = build_lake(tmp_path / "lake", trajectories=400)
    kinds = {
        str(pq.read_schema(path).field("trajectory_id").type) for path in snapshot(lake)["trajectories"].files
    }
    assert kinds == {"string", "string_view"}  # appended and MERGE-written files both
    assert any("LIMIT" in s for s in statements()) and any("LIMIT" not in s for s in statements())
    outcomes = stress(commands_for(lake), repeat=2, parallel=8, burners=2, timeout_s=60)
    hangs = [o.command for o in outcomes if o.returncode is None]
    aborts = [(o.command, o.returncode, o.stderr[-500:]) for o in outcomes if o.aborted]
    assert not hangs, hangs
    assert not aborts, aborts
    sql_runs = [o for o in outcomes if o.command.startswith("sql ")]
    assert len(sql_runs) == 2 * len(statements())
    assert all(o.returncode == 0 for o in sql_runs)
    report_runs = [o for o in outcomes if o.command.startswith("report ")]
    assert [o.returncode for o in report_runs] == [2, 2]  # a bad --since: one line, exit 2
    assert all(len(o.stderr.strip().splitlines()) == 1 for o in report_runs)
