"""Benchmark of the judging stage: RULER throughput as concurrency grows, programmatic rewards/s.

RULER: a stand-in judge (OpenAI chat-completions protocol on 127.0.0.1, in its own
process) answers every call after `--latency` seconds (1 s by default). For each
concurrency level c in 1..64 the stage judges `--rounds`*c groups (8*c by default; cache
off, `force`), and we
report groups/s against the ideal c / latency. Target: >= 80% of ideal up to 64.
The time measured is the whole `score()` call: selecting groups in DuckDB, building
prompts, the HTTP calls, parsing, and committing the rewards to Parquet.

To tell the stage's overhead from the machine's limits, the same prompts are also
sent by the bare `openai` client at the same concurrency ("bare client"): on a small,
shared machine the client, the stand-in judge and everything else compete for cores.

Programmatic: built-in function rewards and a SQL reward over synthetic trajectories.

    python bench/judging.py [--latency 1.0] [--max-concurrency 64] [--rounds 8] [--trajectories 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow
# the `judging` package: put the repository root first instead.
ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.synthetic import synthetic_trajectories  # noqa: E402
from judging.config import JudgeConfig, ScoreConfig  # noqa: E402
from judging.ruler import DEFAULT_RUBRIC  # noqa: E402
from judging.ruler.prompt import build_prompt  # noqa: E402
from judging.select import load_groups  # noqa: E402
from judging.sql_reward import SqlReward  # noqa: E402
from judging.stage import score  # noqa: E402
from store.catalog.connection import connect  # noqa: E402
from store.lake import Lake  # noqa: E402
from store.writer import write  # noqa: E402

GROUP_SIZE = 4


def _serve(latency: float, port_queue: mp.Queue) -> None:
    from tests.judging.fake_judge import FakeJudge, JudgeServer

    with JudgeServer(FakeJudge(delay_s=latency)) as server:
        port_queue.put(server.base_url)
        while True:
            time.sleep(3600)


async def _bare_client(base_url: str, prompt: list[dict[str, str]], n: int, concurrency: int) -> float:
    """Seconds the bare `openai` client takes to send `n` such prompts, `concurrency` at a time."""
    import openai
    from openai.types.chat import ChatCompletion

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)
    limit = asyncio.Semaphore(concurrency)
    body = {"model": "stand-in-judge", "messages": prompt}

    async def one() -> None:
        async with limit:
            await client.post("/chat/completions", cast_to=ChatCompletion, body=body)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


def bench_ruler(lake: Lake, base_url: str, latency: float, levels: list[int], rounds: int) -> list[tuple]:
    con = connect(lake)
    [(first,)] = con.execute("SELECT min(group_id) FROM trajectories").fetchall()
    members = load_groups(con, [first])[first]
    prompt = build_prompt(
        members, DEFAULT_RUBRIC, 0, max_context_tokens=128_000, chars_per_token=3.5, max_message_chars=8000
    ).messages
    results = []
    for concurrency in levels:
        n_groups = rounds * concurrency
        judge = JudgeConfig(
            model="stand-in-judge", base_url=base_url, concurrency=concurrency, use_cache=False, timeout_s=60
        )
        # Judge the first n groups again each time (force, no cache): same data, fresh calls.
        config = ScoreConfig(progress=False, force=True, limit_groups=n_groups, flush_every=64)
        started = time.perf_counter()
        summary = score(lake, "ruler", config, judge=judge)
        elapsed = time.perf_counter() - started
        ideal = concurrency / latency
        rate = summary.groups_scored / elapsed
        bare = n_groups / asyncio.run(_bare_client(base_url, prompt, n_groups, concurrency))
        results.append(
            (concurrency, summary.groups_scored, summary.groups_failed, elapsed, rate, ideal, bare)
        )
    return results


def bench_programmatic(lake: Lake) -> list[tuple]:
    results = []
    n = connect(lake).execute("SELECT count(*) FROM trajectories").fetchone()[0]
    for label, reward in (
        ("valid_json (Python)", "valid_json"),
        ("tool_success (Python)", "tool_success"),
        (
            "SQL expression",
            SqlReward("CASE WHEN final_output LIKE '%order%' THEN 1 ELSE 0 END", "mentions_order"),
        ),
    ):
        started = time.perf_counter()
        summary = score(lake, reward, ScoreConfig(progress=False, force=True))
        elapsed = time.perf_counter() - started
        results.append((label, n, summary.rows_written, elapsed, summary.rows_written / elapsed))
    return results


def ruler_table(rows: list[tuple], latency: float) -> Table:
    table = Table(title=f"RULER throughput, judge latency {latency:g} s (target >= 80% of ideal)")
    for column in (
        "concurrency",
        "groups",
        "failed",
        "seconds",
        "groups/s",
        "ideal",
        "% of ideal",
        "bare client % of ideal",
    ):
        table.add_column(column, justify="right")
    for c, groups, failed, secs, rate, ideal, bare in rows:
        style = "green" if rate / ideal >= 0.8 else "red"
        table.add_row(
            str(c),
            str(groups),
            str(failed),
            f"{secs:.2f}",
            f"{rate:.1f}",
            f"{ideal:.0f}",
            f"[{style}]{rate / ideal:.0%}[/{style}]",
            f"{bare / ideal:.0%}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--latency", type=float, default=1.0, help="Seconds the stand-in judge takes per call."
    )
    parser.add_argument("--max-concurrency", type=int, default=64, help="Highest concurrency level.")
    parser.add_argument("--rounds", type=int, default=8, help="Groups per level = rounds x concurrency.")
    parser.add_argument(
        "--trajectories", type=int, default=20_000, help="Trajectories for programmatic rewards."
    )
    args = parser.parse_args()
    levels = [c for c in (1, 2, 4, 8, 16, 32, 64, 128) if c <= args.max_concurrency]
    console = Console()

    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(args.latency, ports), daemon=True)
    server.start()
    base_url = ports.get(timeout=120)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lake = Lake(f"{tmp}/lake")
            n = args.rounds * max(levels) * GROUP_SIZE
            for batch in synthetic_trajectories(n, seed=1, replayed_fraction=1.0, group_size=GROUP_SIZE):
                write(lake, "trajectories", batch)
            console.print(
                ruler_table(bench_ruler(lake, base_url, args.latency, levels, args.rounds), args.latency)
            )
            load = os.getloadavg()
            console.print(
                f"{os.cpu_count()} CPUs, load average {load[0]:.1f} after the run. `bare client`: the openai "
                "client alone sending the same prompts to the same judge (this machine's ceiling)."
            )
        with tempfile.TemporaryDirectory() as tmp:
            lake = Lake(f"{tmp}/lake")
            for batch in synthetic_trajectories(args.trajectories, seed=2):
                write(lake, "trajectories", batch)
            table = Table(title=f"Programmatic rewards over {args.trajectories:,} synthetic trajectories")
            for column in ("reward", "trajectories", "rows written", "seconds", "rows/s"):
                table.add_column(column, justify="right")
            for label, n_traj, rows, secs, rate in bench_programmatic(lake):
                table.add_row(label, f"{n_traj:,}", f"{rows:,}", f"{secs:.2f}", f"{rate:,.0f}")
            console.print(table)
    finally:
        server.kill()
        server.join(timeout=10)


if __name__ == "__main__":
    main()
