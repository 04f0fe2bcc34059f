"""Benchmark `trajlake forget` of one user in bench's synthetic lake.

    python bench/forget.py                        # 1,000,000 trajectories and their rewards
    python bench/forget.py --n 100000 --keep /tmp/forget-lake   # reuse the lake on the next run

Writes the synthetic lake (`bench.synthetic`, as `bench/lake.py` does) unless `--keep`
already holds one, picks one user, and times each step of the erasure: the plan (dry
run), the erasure itself (spools, adapters, judge cache, rows, history purge) and the
check of every file. Prints files rewritten and bytes written. Goal: under 60 s.
Note that a lake can only forget a user once: with `--keep`, each run erases another user.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench.synthetic import synthetic_rewards, synthetic_trajectories
from flows.stages.forget import carry_out, plan
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.erasure.plan import ErasureSelection
from store.lake import Lake
from store.writer import write

SEED = 7


def build_lake(root: str, n: int) -> float:
    start = time.perf_counter()
    write(root, "trajectories", synthetic_trajectories(n, SEED, batch_size=20_000))
    write(root, "rewards", synthetic_rewards(n, SEED))
    return time.perf_counter() - start


def pick_user(lake: Lake) -> tuple[str, int]:
    """A user still in the lake, with how many conversations they have."""
    con = connect(lake)
    try:
        return con.sql(
            "SELECT user_id, count(*) FROM trajectories WHERE user_id IS NOT NULL "
            "GROUP BY user_id ORDER BY hash(user_id) LIMIT 1"
        ).fetchall()[0]
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="Trajectories in the synthetic lake.")
    parser.add_argument("--keep", help="Lake folder to build once and reuse (default: a temporary one).")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="trajlake-forget-")
    lake = Lake(root)
    console = Console()
    built = None
    if not lake.has_table("trajectories"):
        console.print(f"writing {args.n:,} trajectories to {root} …")
        built = build_lake(root, args.n)
    rows = connect(lake).sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    files = {t: len(snapshot(lake)[t].files) for t in ("trajectories", "rewards")}
    user, conversations = pick_user(lake)

    start = time.perf_counter()
    erasure, _adapters = plan(lake, ErasureSelection("user_id", user), requested_by="bench")
    planned = time.perf_counter() - start
    steps: dict[str, float] = {}
    last = [time.perf_counter(), "spools"]

    def on_step(name: str) -> None:
        now = time.perf_counter()
        steps[str(last[1])] = steps.get(str(last[1]), 0.0) + now - float(last[0])
        last[0], last[1] = now, name.split(" ")[0].strip("`")

    start = time.perf_counter()
    last[0] = start
    report = carry_out(lake, erasure, on_step=on_step)
    on_step("done")
    erased = time.perf_counter() - start

    table = Table(
        title=f"forget one user in a lake of {rows:,} trajectories (load: {os.getloadavg()[0]:.2f})"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    if built is not None:
        table.add_row("building the lake (not timed against the goal)", f"{built:.1f} s")
    table.add_row("files in trajectories / rewards", f"{files['trajectories']} / {files['rewards']}")
    table.add_row("the user's conversations", f"{conversations}")
    table.add_row("plan (dry run)", f"{planned:.2f} s")
    for name, seconds in steps.items():
        table.add_row(f"  erase: {name}", f"{seconds:.2f} s")
    table.add_row("erase + check, total", f"{erased:.2f} s")
    table.add_row("forget wall time (plan + erase + check)", f"{planned + erased:.2f} s (goal < 60 s)")
    table.add_row(
        "rows erased", ", ".join(f"{t.table} {t.rows_deleted}" for t in report.tables if t.rows_deleted)
    )
    table.add_row("files rewritten", f"{report.files_rewritten}")
    table.add_row("bytes written", f"{report.bytes_written:,}")
    table.add_row("verified", str(report.verified))
    console.print(table)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
