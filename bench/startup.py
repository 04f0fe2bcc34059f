"""How long `trajlake` takes to start, against importing the libraries a lake query needs.

    python bench/startup.py              # best of 7 fresh processes per command
    python bench/startup.py --runs 15

Each command runs `--runs` times in a fresh interpreter, interleaved (one of each, then the
next round) so that a burst of load on a shared machine falls on all of them alike; the
best wall time of each is compared with `python -c "import duckdb, pyarrow"`, the floor a
command that queries the lake cannot go under. `trajlake sql` runs on a small lake written
first (six trajectories), once as configured by nothing and once by a `trajlake.toml`. Goal (issue 57): `trajlake --help` and `trajlake sql "select 1"`
within 1.5x of that import. The last line is one JSON object: best seconds and ratio per
command, the runs and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

BASELINE = "import duckdb, pyarrow"
TRAJLAKE = [sys.executable, "-m", "flows.cli"]


def commands(lake: str, config: Path) -> dict[str, list[str]]:
    """What is timed, by the name shown; the first is the baseline the others are compared with.

    `sql` twice: with nothing to configure (`[lake]` is its declared defaults) and with a
    `trajlake.toml` that sets `[lake]`, which pydantic-settings reads (`env` adds ~1 ms)."""
    return {
        f'python -c "{BASELINE}"': [sys.executable, "-c", BASELINE],
        "trajlake --help": [*TRAJLAKE, "--help"],
        'trajlake sql "select 1"': [*TRAJLAKE, "sql", "select 1", "--lake", lake],
        'trajlake sql "select 1", a trajlake.toml': [
            "env",
            f"TRAJLAKE_CONFIG={config}",
            *TRAJLAKE,
            "sql",
            "select 1",
            "--lake",
            lake,
        ],
        "trajlake collect --help": [*TRAJLAKE, "collect", "--help"],
    }


def small_lake(folder: Path) -> str:
    """A lake with six trajectories (the tests' rows), written in a process of its own."""
    lake = str(folder / "lake")
    program = (
        "import sys; from store.writer import write; from tests.store.helpers import make_traj; "
        "write(sys.argv[1], 'trajectories', [make_traj(i) for i in range(6)])"
    )
    subprocess.run([sys.executable, "-c", program, lake], cwd=ROOT, check=True)
    return lake


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per command (the best counts)")
    args = parser.parse_args()
    # the checkout's code, whatever is installed; no ambient lake or config file
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for variable in ("TRAJLAKE_LAKE", "TRAJLAKE_CONFIG"):
        env.pop(variable, None)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "trajlake.toml"
        config.write_text("[lake]\nsql_timeout_s = 60\n")
        timed = commands(small_lake(Path(tmp)), config)
        for argv in timed.values():  # once untimed: bytecode compiled, files in the page cache
            wall_s(argv, env)
        walls: dict[str, list[float]] = {name: [] for name in timed}
        for _ in range(args.runs):
            for name, argv in timed.items():
                walls[name].append(wall_s(argv, env))
    best = {name: min(times) for name, times in walls.items()}
    floor = next(iter(best.values()))
    table = Table(title=f"start-up, best of {args.runs} fresh processes")
    for column in ("command", "best s", "median s", "x import duckdb, pyarrow"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for name, times in walls.items():
        table.add_row(
            name, f"{best[name]:.3f}", f"{sorted(times)[len(times) // 2]:.3f}", f"{best[name] / floor:.2f}"
        )
    Console().print(table)
    print(
        json.dumps(
            {
                "best_s": {name: round(s, 3) for name, s in best.items()},
                "ratio": {name: round(s / floor, 2) for name, s in best.items()},
                "runs": args.runs,
                "load_average": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
