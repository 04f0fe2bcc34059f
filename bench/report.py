"""Benchmark: `trajlake report` on a large lake (bench/synthetic), seconds and peak memory.

    python bench/report.py [--trajectories 1000000] [--lake PATH]

Writes `--trajectories` synthetic trajectories (production traces and replayed groups with
token data, several rewards each) and their rewards into a fresh lake (or reuses `--lake`
when it already holds them), then times `flows.report.build_report` end to end: every
section's query, the group viewer's selection and its groups' rows, the plots and the HTML.
Prints a table with the lake's size, the report's seconds, its size and the groups shown.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench.synthetic import synthetic_rewards, synthetic_trajectories
from store.catalog.connection import connect
from store.writer import write

SEED = 11


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectories", type=int, default=1_000_000)
    parser.add_argument("--lake", help="A lake to reuse (written first when empty).")
    args = parser.parse_args()
    from flows.report import build_report

    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-report-"))
    root = args.lake or str(work / "lake")
    console = Console(width=140)
    try:
        written = 0.0
        if not Path(root, "trajectories").exists():
            start = time.perf_counter()
            write(root, "trajectories", synthetic_trajectories(args.trajectories, SEED, batch_size=50_000))
            write(root, "rewards", synthetic_rewards(args.trajectories, SEED))
            written = time.perf_counter() - start
            console.log(f"lake written in {written:.0f} s")
        con = connect(root, read_only=True)
        rows = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("trajectories", "rewards")
        }
        replayed = con.execute("SELECT count(*) FROM trajectories WHERE source = 'replay'").fetchone()[0]
        start = time.perf_counter()
        path, data = build_report(root, str(work / "report.html"))
        seconds = time.perf_counter() - start
        table = Table(title="trajlake report on a synthetic lake")
        for column in (
            "trajectories",
            "replayed",
            "rewards",
            "report s",
            "report MiB",
            "groups shown",
            "of",
            "peak RSS MiB",
        ):
            table.add_column(column, justify="right")
        table.add_row(
            f"{rows['trajectories']:,}",
            f"{replayed:,}",
            f"{rows['rewards']:,}",
            f"{seconds:.1f}",
            f"{Path(path).stat().st_size / 2**20:.1f}",
            str(len(data.groups.groups) if data.groups else 0),
            f"{data.groups.total:,}" if data.groups else "0",
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f}",
        )
        console.print(table)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
