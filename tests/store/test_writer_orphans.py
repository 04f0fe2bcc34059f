"""A write that loses its commit removes the files it wrote (no copy of its rows outlives it).

Those files are named by no Delta version; vacuum would keep them an hour (a younger unnamed
file may be another writer's next commit), so an erasure running meanwhile found the rows of a
collector's lost attempt in them and could not say the data was gone (issue 55).
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from store import writer
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.store.helpers import T0


def _span(trace: int, span: int) -> dict[str, Any]:
    return {"trace_id": f"{trace:032x}", "span_id": f"{span:016x}", "source": "otel", "start_time": T0}


def _unnamed(lake: Lake, table: str) -> set[str]:
    """Data files no version of the log ever added (a replaced file is named by its old version)."""
    root = f"{lake.root}/{table}"
    named = set()
    for entry in glob.glob(f"{root}/_delta_log/*.json"):
        for line in Path(entry).read_text(encoding="utf-8").splitlines():
            add = json.loads(line).get("add")
            if add:
                named.add(f"{root}/{unquote(add['path'])}")
    return set(glob.glob(f"{root}/**/*.parquet", recursive=True)) - named


@pytest.mark.parametrize("table", ["spans", "trajectories"])
def test_a_write_that_loses_a_race_leaves_no_file_behind(
    lake: Lake, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    def row(n: int) -> dict[str, Any]:
        if table == "spans":
            return _span(n, n)
        return {"trajectory_id": f"traj-{n}", "source": "otel", "started_at": T0, "user_id": f"u-{n}"}

    write(lake, table, [row(0)])
    real = writer._holders
    raced = []

    def holders_then_a_rival_commits(*args: Any) -> Any:
        found = real(*args)
        if not raced:  # another writer commits between this attempt's read and its commit
            raced.append(True)
            write(lake, table, [row(2)])
        return found

    monkeypatch.setattr(writer, "_holders", holders_then_a_rival_commits)
    result = write(lake, table, [row(1), row(0)])
    assert result.attempts == 2  # the first attempt lost, wrote its files, and the second won
    assert _unnamed(lake, table) == set()
    assert connect(lake).execute(f"SELECT count(*) FROM {table}").fetchall() == [(3,)]
