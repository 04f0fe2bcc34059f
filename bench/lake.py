"""Benchmark the lake (Delta tables): writes of new keys and upserts, then a fixed set of queries.

    python bench/lake.py                 # 1,000,000 trajectories (~8M messages)
    python bench/lake.py --n 100000 --keep /tmp/lake

1. **Write.** A child process generates synthetic trajectories and rewards and writes
   them with `store.writer.write` (Delta MERGE on the key); it reports rows/s (time spent
   generating is subtracted) and its peak RSS. Then upserts: 10% of the trajectories
   written again (re-assembled), and small batches of new keys into the full table (what
   a collector's assembler commits every second). Targets: >= 100,000 new trajectories/s,
   peak RSS < 2 GB.
2. **Queries** through trajlake's views, on the lake as written and after `store.maintenance.compact`,
   against plain DuckDB over one ideally compacted Parquet file per table holding the
   same rows, and over the previous release's format: the same rows as append-only
   Parquet files in which upserted keys repeat, read through its deduplicating window.
   Each query runs `--repeat` times per setup, the setups taking turns (so load from other
   work on the machine falls on all of them alike); the best time counts. Target: every query on the
   compacted lake within 1.2x of the single file. Results must agree across setups.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from bench.synthetic import synthetic_rewards, synthetic_trajectories, trajectory_ids
from store.catalog import DERIVED_VIEWS
from store.catalog.connection import connect
from store.maintenance import CompactConfig, compact
from store.schema import empty_table, table_spec
from store.writer import write

SEED = 7

QUERIES: dict[str, str] = {
    "reward by model and day": """
        SELECT t.model, t.dt, r.name, round(avg(r.value), 9) AS mean, count(*) AS n
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        GROUP BY ALL ORDER BY ALL""",
    "groups with reward std > 0.3": """
        SELECT group_id, size, round(mean, 6), round(std, 6) FROM groups
        WHERE name = 'ruler' AND std > 0.3 ORDER BY group_id""",
    "failed tool calls by tool": """
        SELECT name AS tool, count(*) AS failures FROM messages
        WHERE role = 'tool' AND is_error GROUP BY name ORDER BY failures DESC, tool""",
    "one trajectory by id": "SELECT * FROM trajectories WHERE trajectory_id = '{one_id}'",
}


# --- write --------------------------------------------------------------------------------


class _Timed:
    """Wraps a generator and accumulates the time spent inside it (generation, not writing)."""

    def __init__(self, source: Iterator[pa.Table]) -> None:
        self.source = source
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # CPU of the generating (main) thread only
        self.messages = 0

    def __iter__(self) -> Iterator[pa.Table]:
        while True:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                batch = next(self.source)
            except StopIteration:
                return
            finally:
                self.seconds += time.perf_counter() - start
                self.cpu_seconds += time.thread_time() - cpu
            if "messages" in batch.column_names:
                self.messages += sum(len(chunk.values) for chunk in batch["messages"].chunks)
            yield batch


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _write_child(root: str, n: int, queue: Any) -> None:
    start, cpu = time.perf_counter(), _cpu()
    trajectories = _Timed(synthetic_trajectories(n, SEED, batch_size=20_000))
    result = write(root, "trajectories", trajectories)
    t_elapsed = time.perf_counter() - start
    t_cpu = _cpu() - cpu - trajectories.cpu_seconds
    start = time.perf_counter()
    rewards = _Timed(synthetic_rewards(n, SEED))
    reward_result = write(root, "rewards", rewards)
    r_elapsed = time.perf_counter() - start
    queue.put(
        {
            "rows": result.rows,
            "files": result.files_added,
            "messages": trajectories.messages,
            "elapsed": t_elapsed,
            "generating": trajectories.seconds,
            "write_cpu": t_cpu,
            "reward_rows": reward_result.rows,
            "reward_elapsed": r_elapsed,
            "reward_generating": rewards.seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def bench_write(root: str, n: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # a fresh interpreter: RSS is the writer's alone
    queue = ctx.Queue()
    proc = ctx.Process(target=_write_child, args=(root, n, queue))
    proc.start()
    stats = queue.get()
    proc.join()
    return stats


def upserted(n: int) -> Iterator[pa.Table]:
    """Every tenth trajectory again, with another model: what re-assembly writes."""
    for batch in synthetic_trajectories(n, SEED, batch_size=20_000):
        every_tenth = batch.take(list(range(0, batch.num_rows, 10)))
        model = pa.array(["reassembled"] * every_tenth.num_rows)
        yield every_tenth.set_column(every_tenth.schema.get_field_index("model"), "model", model)


def bench_upserts(root: str, n: int) -> dict[str, float]:
    start = time.perf_counter()
    result = write(root, "trajectories", upserted(n))
    upsert_s = time.perf_counter() - start
    small = []
    for k in range(5):  # new keys into the full table, as an assembler commits them
        rows = synthetic_trajectories(1_000, SEED + 100 + k, batch_size=1_000)
        start = time.perf_counter()
        write(root, "trajectories", rows)
        small.append(time.perf_counter() - start)
    return {"upserted": result.updated, "upsert_s": upsert_s, "small_s": sorted(small)[len(small) // 2]}


# --- queries ------------------------------------------------------------------------------


def single_file_connection(root: str, out: str) -> duckdb.DuckDBPyConnection:
    """Plain DuckDB over one Parquet file per table (the lake's rows, deduplicated)."""
    con = connect(root)
    for table in ("trajectories", "rewards"):
        spec = table_spec(table)
        reader = con.sql(f"SELECT * FROM {table}").to_arrow_reader(65_536)
        path = f"{out}/{table}.parquet"
        with pq.ParquetWriter(path, spec.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(
                    batch.cast(spec.schema) if batch.schema != spec.schema else batch, row_group_size=64_000
                )
    con.close()
    plain = duckdb.connect()
    for table in ("trajectories", "rewards"):
        plain.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{out}/{table}.parquet')")
    _add_derived_views(plain)
    return plain


def old_format_connection(root: str, n: int, out: str) -> duckdb.DuckDBPyConnection:
    """The previous release's format: append-only files (upserted keys repeat) read through its window."""
    os.makedirs(f"{out}/trajectories", exist_ok=True)
    con = connect(root)
    for name, sql in (
        ("base", "SELECT * FROM trajectories WHERE model <> 'reassembled'"),
        ("again", "SELECT * FROM trajectories WHERE model = 'reassembled'"),
    ):
        pq.write_table(
            con.sql(sql).fetch_arrow_table(), f"{out}/trajectories/{name}.parquet", compression="zstd"
        )
    # the upserted keys' first versions, as the old writer left them beside their newer rows
    first = {"model": "m-old"}
    pq.write_table(
        con.sql(
            f"SELECT * REPLACE ('{first['model']}' AS model, _written_at - INTERVAL 1 HOUR AS _written_at) FROM trajectories WHERE model = 'reassembled'"
        ).fetch_arrow_table(),
        f"{out}/trajectories/first.parquet",
        compression="zstd",
    )
    # `store.catalog.connection.connect` opens no file, so pyarrow writes what it reads (bench/lake.py broke when it stopped)
    pq.write_table(
        con.sql("SELECT * FROM rewards").fetch_arrow_table(), f"{out}/rewards.parquet", compression="zstd"
    )
    con.close()
    old = duckdb.connect()
    old.execute(
        f"""CREATE VIEW trajectories AS SELECT * FROM read_parquet('{out}/trajectories/*.parquet', union_by_name=true)
        QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY _written_at DESC) = 1"""
    )
    old.execute(f"CREATE VIEW rewards AS SELECT * FROM read_parquet('{out}/rewards.parquet')")
    _add_derived_views(old)
    return old


def _add_derived_views(con: duckdb.DuckDBPyConnection) -> None:
    """trajlake's derived views over a baseline's `trajectories` and `rewards` (no adapters published)."""
    con.register("adapters", empty_table("adapters"))
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")


def run_queries(
    setups: dict[str, duckdb.DuckDBPyConnection], repeat: int, one_id: str
) -> dict[str, dict[str, tuple[float, list[Any]]]]:
    """Per setup and query: (best seconds, rows). The setups take turns query by query, so a
    change in the machine's load between them cannot pass for a difference between them."""
    out: dict[str, dict[str, tuple[float, list[Any]]]] = {name: {} for name in setups}
    for _ in range(repeat):
        for name, sql in QUERIES.items():
            for setup, con in setups.items():
                start = time.perf_counter()
                rows = con.execute(sql.format(one_id=one_id)).fetchall()
                seconds = time.perf_counter() - start
                best = out[setup].get(name, (float("inf"), []))[0]
                out[setup][name] = (min(best, seconds), rows)
    return out


# --- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="trajectories to write")
    parser.add_argument("--repeat", type=int, default=5, help="runs per query and setup (the best counts)")
    parser.add_argument("--keep", default=None, help="write the lake here and keep it (default: a temp dir)")
    args = parser.parse_args()
    console = Console(width=160)
    work = args.keep or tempfile.mkdtemp(prefix="trajlake-bench-")
    root = f"{work}/lake"
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(f"{work}/single", exist_ok=True)
    load_before = os.getloadavg()[0]
    console.print(f"[bold]trajlake lake benchmark[/]: n={args.n:,} on {os.cpu_count()} cores, lake at {root}")

    with console.status("writing new keys…"):
        w = bench_write(root, args.n)
    with console.status("writing upserts…"):
        u = bench_upserts(root, args.n)
    write_s = w["elapsed"] - w["generating"]
    one_id = trajectory_ids(1, SEED, start=args.n // 2 + 17).to_pylist()[0]

    with console.status("querying the lake as written…"):
        fresh = run_queries({"fresh": connect(root)}, args.repeat, one_id)["fresh"]
    with console.status("compacting…"):
        start = time.perf_counter()
        results = compact(root, CompactConfig(tables=("trajectories", "rewards"), retention_hours=0))
        compact_s = time.perf_counter() - start
    with console.status("building the single-file baseline and the previous release's format…"):
        setups = {
            "compacted": connect(root),
            "single": single_file_connection(root, f"{work}/single"),
            "old": old_format_connection(root, args.n, f"{work}/old"),
        }
    with console.status("querying the compacted lake, the single file and the old format in turns…"):
        timed = run_queries(setups, args.repeat, one_id)
    compacted, single, old = timed["compacted"], timed["single"], timed["old"]

    table = Table(title=f"write ({args.n:,} trajectories, {w['messages']:,} messages)")
    for col in ("what", "value", "target", "ok"):
        table.add_column(col)
    rate = w["rows"] / write_s
    table.add_row("new trajectories/s (one MERGE)", f"{rate:,.0f}", ">= 100,000", _ok(rate >= 100_000))
    table.add_row("new trajectories per CPU-second", f"{w['rows'] / w['write_cpu']:,.0f}", "", "")
    table.add_row("messages/s", f"{w['messages'] / write_s:,.0f}", "", "")
    table.add_row(
        "rewards/s (one MERGE)",
        f"{w['reward_rows'] / (w['reward_elapsed'] - w['reward_generating']):,.0f}",
        "",
        "",
    )
    table.add_row(
        "peak RSS of the writer", f"{w['peak_rss_mb']:,.0f} MB", "< 2,048 MB", _ok(w["peak_rss_mb"] < 2048)
    )
    table.add_row(
        f"upserts: {u['upserted']:,} trajectories re-written",
        f"{u['upserted'] / u['upsert_s']:,.0f}/s ({u['upsert_s']:.1f} s)",
        "",
        "",
    )
    table.add_row("1,000 new keys into the full table (median of 5)", f"{u['small_s']:.2f} s", "", "")
    table.add_row(
        "compact (OPTIMIZE Z-order + VACUUM, both tables)",
        f"{compact_s:.1f} s, {sum(r.files_removed for r in results)} -> {sum(r.files_added for r in results)} files",
        "",
        "",
    )
    console.print(table)

    queries = Table(title=f"queries (best of {args.repeat}, seconds)")
    for col in (
        "query",
        "views, as written",
        "views, compacted",
        "single file",
        "ratio",
        "old format",
        "target",
        "ok",
    ):
        queries.add_column(col)
    failed = False
    for name in QUERIES:
        (f_s, f_rows), (c_s, c_rows), (s_s, s_rows), (o_s, o_rows) = (
            fresh[name],
            compacted[name],
            single[name],
            old[name],
        )
        same = _norm(f_rows) == _norm(c_rows) == _norm(s_rows) == _norm(o_rows)
        failed |= not same
        ratio = c_s / s_s if s_s else float("inf")
        good = ratio <= 1.2 or c_s - s_s < 0.01
        queries.add_row(
            name + ("" if same else " [red](RESULTS DIFFER)[/]"),
            f"{f_s:.3f}",
            f"{c_s:.3f}",
            f"{s_s:.3f}",
            f"{ratio:.2f}x",
            f"{o_s:.3f}",
            "<= 1.2x",
            _ok(good),
        )
    console.print(queries)
    console.print(
        f"machine: {os.cpu_count()} cores; 1-minute load average {load_before:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end (other work on the machine slows every column alike)"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        raise SystemExit("query results differ between the setups")


def _norm(rows: list[Any]) -> list[str]:
    return sorted(repr(r) for r in rows)


def _ok(good: bool) -> str:
    return "[green]yes[/]" if good else "[red]no[/]"


if __name__ == "__main__":
    main()
