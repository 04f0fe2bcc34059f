"""`trajlake sql` and `trajlake report` in fresh processes, many at once, under CPU load.

A query that stops early (LIMIT) or fails must exit as it should, every time, on every
machine: an abort at interpreter exit (a thread left inside Python) or a hang shows up only
across many fresh processes, several at a time, on a busy machine. This runs each statement
`--repeat` times with `--parallel` processes at once while `--burners` processes keep every
core busy, on a lake whose tables hold files of both kinds the lake has (appended ones, and
MERGE-written ones with `string_view` columns), and prints per statement the runs, aborts
(a signal or an unexpected exit code) and hangs (past `--timeout-s`).

    python bench/sql_stress.py                       # 50 runs of each, 8 at a time
    python bench/sql_stress.py --repeat 5 --parallel 4

The last line is one JSON object: runs, aborts, hangs, wall seconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.synthetic import synthetic_rewards, synthetic_trajectories
from flows.demo.config import SQL_RECIPES
from store.lake import Lake
from store.writer import write

# The README's and the docs' queries besides the demo's recipes.
DOC_QUERIES = [
    "SELECT * FROM messages LIMIT 3",
    "SELECT model, count(*) FROM trajectories GROUP BY ALL",
    "SELECT * FROM erasures",
    "SELECT * FROM latest_rewards LIMIT 5",
    "SELECT * FROM policy_performance",
    "SELECT * FROM spans LIMIT 5",
]
_LIMIT = re.compile(r"\s+LIMIT\s+\d+\s*$", re.IGNORECASE)


def statements() -> list[str]:
    """Every recipe and documented query, with and without a LIMIT."""
    out: list[str] = []
    for sql in [sql for _, sql in SQL_RECIPES] + DOC_QUERIES:
        bare = _LIMIT.sub("", sql)
        out += [bare, f"{bare} LIMIT 3"]
    return list(dict.fromkeys(out))


def build_lake(root: Path, trajectories: int = 2_000) -> Lake:
    """A lake with appended and MERGE-written files in `trajectories` and `rewards`."""
    lake = Lake(str(root))
    options = {"replayed_fraction": 0.5, "group_size": 4}
    for table in synthetic_trajectories(trajectories, seed=7, batch_size=trajectories // 4, **options):
        write(lake, "trajectories", table)
    for table in synthetic_rewards(trajectories, seed=7, batch_size=trajectories // 4, **options):
        write(lake, "rewards", table)
    # Writing a slice again goes through MERGE, whose files carry `string_view` columns.
    again = next(synthetic_trajectories(trajectories // 4, seed=7, **options))
    write(lake, "trajectories", again)
    write(lake, "rewards", next(synthetic_rewards(trajectories // 4, seed=7, **options)))
    return lake


@dataclass(frozen=True)
class Outcome:
    command: str
    returncode: int | None  # None: killed after the timeout (a hang)
    stderr: str

    @property
    def aborted(self) -> bool:
        return self.returncode is not None and self.returncode not in (0, 2)


def run_command(args: list[str], timeout_s: float) -> Outcome:
    """One fresh `trajlake` process; a hang is killed and reported, not waited for."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONFAULTHANDLER": "1"}
    command = [sys.executable, "-m", "flows.cli", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return Outcome(" ".join(args), None, stderr)
    return Outcome(" ".join(args), done.returncode, done.stderr)


def _burn() -> None:
    while True:
        pass


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """`processes` busy loops for the duration: the machine as loaded as a shared CI runner."""
    burners = [mp.get_context("spawn").Process(target=_burn, daemon=True) for _ in range(processes)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.join()


def stress(
    commands: list[list[str]], *, repeat: int, parallel: int, burners: int, timeout_s: float
) -> list[Outcome]:
    """Every command `repeat` times, `parallel` processes at once, under `burners` busy loops."""
    jobs = [args for args in commands for _ in range(repeat)]
    with cpu_load(burners), ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda args: run_command(args, timeout_s), jobs))


def commands_for(lake: Lake) -> list[list[str]]:
    sql = [["sql", "--lake", lake.root, statement] for statement in statements()]
    bad_report = [["report", "--lake", lake.root, "--since", "yesterday-ish", "--out", os.devnull]]
    return sql + bad_report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=50, help="runs of each statement")
    parser.add_argument("--parallel", type=int, default=8, help="processes at once")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 2, help="busy loops beside them")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a run past this is a hang")
    parser.add_argument("--trajectories", type=int, default=2_000, help="rows in the lake's trajectories")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lake = build_lake(Path(tmp) / "lake", args.trajectories)
        commands = commands_for(lake)
        started = time.monotonic()
        outcomes = stress(
            commands,
            repeat=args.repeat,
            parallel=args.parallel,
            burners=args.burners,
            timeout_s=args.timeout_s,
        )
        wall = time.monotonic() - started
    print(f"{'statement':<90} {'runs':>5} {'aborts':>6} {'hangs':>5}")
    by_command: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_command.setdefault(outcome.command.split(" ", 3)[-1], []).append(outcome)
    for command, runs in by_command.items():
        aborts = sum(o.aborted for o in runs)
        hangs = sum(o.returncode is None for o in runs)
        print(f"{command[:90]:<90} {len(runs):>5} {aborts:>6} {hangs:>5}")
    for outcome in outcomes:
        if outcome.aborted or outcome.returncode is None:
            print(f"\nfirst failure ({outcome.returncode}): {outcome.command}\n{outcome.stderr[-2000:]}")
            break
    summary = {
        "runs": len(outcomes),
        "aborts": sum(o.aborted for o in outcomes),
        "hangs": sum(o.returncode is None for o in outcomes),
        "wall_s": round(wall, 1),
        "parallel": args.parallel,
        "burners": args.burners,
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
