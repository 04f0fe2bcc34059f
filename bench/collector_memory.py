"""Does collector memory come back after load? RSS of a `trajlake collect` process, round by round.

    python bench/collector_memory.py [--rounds 4] [--requests 300] [--fuzz 2500] [--stalled 20]
                                     [--concurrency 8] [--compare]

Each round sends realistic GenAI traces (100 spans per request, assembly on, as in
production), holds `--stalled` clients that stop mid-body until the collector answers
408, and posts `--fuzz` mutated bodies (bit flips, cuts, junk) to every POST endpoint,
from `--concurrency` client threads. It prints one table row per round: RSS before the
round (idle), its peak during the round (sampled every 50 ms), right after the last
answer, and once the collector is idle again (spool flushed, traces assembled, a few
seconds of quiet). Healthy: "idle" comes back to near "before", whatever the number of
rounds. `--compare` runs the same rounds again with `--no-bounded-memory` (glibc's
per-thread arenas and dynamic mmap threshold, Arrow's mimalloc pool) for the contrast.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ingest import free_port, rss_mb  # noqa: E402
from bench.otlp_workload import make_bodies  # noqa: E402

PATHS = ("/v1/traces", "/v1/logs", "/v1/metrics", "/api/public/otel/v1/traces", "/api/public/scores")
# Settings the collector's own defaults replace; a run must not inherit them from the shell.
ALLOCATOR_ENV = (
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "ARROW_DEFAULT_MEMORY_POOL",
)


def start_collector(lake: str, port: int, timeout_s: float, *extra: str) -> subprocess.Popen[bytes]:
    """A `trajlake collect` process with assembly on, once /health answers."""
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV}
    command = [sys.executable, "-m", "flows.cli", "collect", "--lake", lake, "--port", str(port)]
    command += [
        "--flush-seconds",
        "0.5",
        "--idle-timeout",
        "1",
        "--request-timeout-s",
        str(timeout_s),
        *extra,
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the collector did not start")


def mutate(body: bytes, rng: random.Random) -> bytes:
    """`body` with 1-8 random bit flips, cuts, insertions and deletions."""
    data = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        if not data:
            break
        at = rng.randrange(len(data))
        op = rng.random()
        if op < 0.4:
            data[at] ^= 1 << rng.randrange(8)
        elif op < 0.6:
            del data[at:]
        elif op < 0.8:
            data[at:at] = rng.randbytes(rng.randint(1, 16))
        else:
            del data[at : at + rng.randint(1, 64)]
    return bytes(data)


def stalled_client(port: int, done: list[bool]) -> None:
    """Send headers and half a body, then nothing, until the collector gives up on it."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 1000000\r\n\r\n" + b"\0" * 500_000
        )
        answer = sock.recv(64)
        done.append(answer.startswith(b"HTTP/1.1 408"))


def load(
    url: str, bodies: list[bytes], requests: int, fuzz: int, concurrency: int, seed: int
) -> dict[int, int]:
    """`requests` valid bodies and `fuzz` mutated ones from `concurrency` threads; answers by status."""
    rng = random.Random(seed)
    jobs = [("/v1/traces", bodies[i % len(bodies)], "application/x-protobuf") for i in range(requests)]
    for _ in range(fuzz):
        kind = rng.choice(["application/x-protobuf", "application/json"])
        jobs.append((rng.choice(PATHS), mutate(bodies[rng.randrange(len(bodies))][:4000], rng), kind))
    rng.shuffle(jobs)
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    local = threading.local()

    def send(job: tuple[str, bytes, str]) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=60)
        status = local.client.post(job[0], content=job[1], headers={"Content-Type": job[2]}).status_code
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(send, jobs))
    return statuses


def wait_idle(url: str, timeout: float = 300) -> None:
    """Until the collector has nothing spooled and no trace waiting for assembly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = httpx.get(f"{url}/health", timeout=10).json()
        if health["pending_bytes"] == 0 and health["pending_traces"] == 0:
            return
        time.sleep(0.5)


def anon_mb(pid: int) -> float:
    """The process's anonymous resident memory (its heap and pools, not mapped code), MiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakSampler:
    """The highest RSS of a process while it runs (sampled every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def measure(label: str, args: argparse.Namespace, extra: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Rows of the table for one collector configuration."""
    bodies = make_bodies(20)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory() as tmp:
        process = start_collector(str(Path(tmp) / "lake"), port, args.request_timeout, *extra)
        try:
            time.sleep(args.settle)
            start = rss_mb(process.pid)
            before = start
            for n in range(1, args.rounds + 1):
                stalled: list[bool] = []
                stallers = [
                    threading.Thread(target=stalled_client, args=(port, stalled)) for _ in range(args.stalled)
                ]
                sampler = PeakSampler(process.pid)
                for thread in stallers:
                    thread.start()
                began = time.monotonic()
                statuses = load(url, bodies, args.requests, args.fuzz, args.concurrency, seed=n)
                after = rss_mb(process.pid)
                for thread in stallers:
                    thread.join()
                wait_idle(url)
                time.sleep(args.settle)
                idle, anon = rss_mb(process.pid), anon_mb(process.pid)
                peak = max(sampler.stop(), after)
                answers = " ".join(f"{k}:{v}" for k, v in sorted(statuses.items()))
                assert all(k < 500 for k in statuses), statuses
                mib = (before, peak, after, idle, anon)
                rows.append(
                    (label, str(n), *(f"{x:.0f}" for x in mib), f"{idle - start:+.0f}",
                     f"{time.monotonic() - began:.0f}", f"{answers}; 408 {sum(stalled)}/{args.stalled}")
                )  # fmt: skip
                print(" | ".join(rows[-1]), flush=True)
                before = idle
        finally:
            process.terminate()
            process.wait(timeout=120)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=300, help="Valid 100-span requests per round.")
    parser.add_argument("--fuzz", type=int, default=2500, help="Mutated bodies per round.")
    parser.add_argument("--stalled", type=int, default=20, help="Clients that stall mid-body per round.")
    parser.add_argument("--concurrency", type=int, default=8, help="Client threads sending the requests.")
    parser.add_argument("--request-timeout", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=3.0, help="Seconds idle before sampling RSS.")
    parser.add_argument("--compare", action="store_true", help="Also run with --no-bounded-memory.")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{' '.join(platform.libc_ver())}; per round: {args.requests} valid requests, {args.fuzz} fuzzed, "
        f"{args.stalled} stalled, {args.concurrency} client threads",
        flush=True,
    )
    configs = [("bounded (default)", ())]
    if args.compare:
        configs.append(("--no-bounded-memory", ("--no-bounded-memory",)))
    rows = [row for label, extra in configs for row in measure(label, args, extra)]
    header = (
        "collector",
        "round",
        "RSS before",
        "peak",
        "after load",
        "idle",
        "anon idle",
        "idle vs start",
        "s",
        "answers",
    )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
    print(
        "\nRSS in MiB; 'before' of round 1 is the idle collector after start; 'anon idle': its "
        "anonymous part (heap, pools), the rest being mapped code and files."
    )


if __name__ == "__main__":
    main()
