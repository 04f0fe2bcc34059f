"""Does collector memory come back after load? RSS of a `trajlake collect` process across rounds.

    python bench/collector_memory.py [--rounds 4] [--requests 300] [--stalled 50] [--fuzz 2000]

Each round sends realistic GenAI traces (100 spans per request, assembly on, as in
production), holds `--stalled` clients that stop mid-body until the collector answers
408, and posts `--fuzz` mutated bodies (bit flips, cuts, junk) to every POST endpoint.
After each round it waits until the collector is idle (spool flushed, nothing pending)
and samples RSS. Healthy: RSS after each round stays near the first round's, whatever
the number of rounds (no growth per request, no buffers held for stalled clients).
glibc's per-thread arenas add steps of tens of MB over the first rounds before they level
off; `MALLOC_ARENA_MAX=2` in the environment (passed on to the collector) removes them.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ingest import free_port, rss_mb  # noqa: E402
from bench.otlp_workload import make_bodies  # noqa: E402

PATHS = ("/v1/traces", "/v1/logs", "/api/public/otel/v1/traces", "/api/public/scores")


def start_collector(lake: str, port: int, timeout_s: float) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "collect",
            "--lake",
            lake,
            "--port",
            str(port),
            "--flush-seconds",
            "0.5",
            "--idle-timeout",
            "1",
            "--request-timeout-s",
            str(timeout_s),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
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


def run_round(url: str, port: int, bodies: list[bytes], args: argparse.Namespace, rng: random.Random) -> dict:  # type: ignore[type-arg]
    statuses: dict[int, int] = {}
    stalled_done: list[bool] = []
    stallers = [
        threading.Thread(target=stalled_client, args=(port, stalled_done)) for _ in range(args.stalled)
    ]
    for thread in stallers:
        thread.start()
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(args.requests):
            body = bodies[i % len(bodies)]
            r = client.post("/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        for _ in range(args.fuzz):
            path = rng.choice(PATHS)
            kind = rng.choice(["application/x-protobuf", "application/json"])
            body = mutate(bodies[rng.randrange(len(bodies))][:4000], rng)
            r = client.post(path, content=body, headers={"Content-Type": kind})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
    for thread in stallers:
        thread.join()
    return {"statuses": statuses, "stalled_408": sum(stalled_done)}


def wait_idle(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        health = httpx.get(f"{url}/health", timeout=10).json()
        if health["pending_bytes"] == 0 and health["pending_traces"] == 0:
            return
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=300, help="Valid 100-span requests per round.")
    parser.add_argument("--stalled", type=int, default=50, help="Clients that stall mid-body per round.")
    parser.add_argument("--fuzz", type=int, default=2000, help="Mutated bodies per round.")
    parser.add_argument("--request-timeout", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=3.0, help="Seconds idle before sampling RSS.")
    args = parser.parse_args()
    rng = random.Random(13)
    bodies = make_bodies(20)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        process = start_collector(str(Path(tmp) / "lake"), port, args.request_timeout)
        try:
            time.sleep(args.settle)
            print(f"after start: RSS {rss_mb(process.pid):.0f} MB", flush=True)
            for n in range(1, args.rounds + 1):
                started = time.monotonic()
                outcome = run_round(url, port, bodies, args, rng)
                wait_idle(url)
                time.sleep(args.settle)
                print(
                    f"round {n}: RSS {rss_mb(process.pid):.0f} MB after idle; "
                    f"{time.monotonic() - started:.0f}s; answers {dict(sorted(outcome['statuses'].items()))}; "
                    f"stalled clients answered 408: {outcome['stalled_408']}/{args.stalled}",
                    flush=True,
                )
            print(f"health: {httpx.get(f'{url}/health').json()['status']}")
        finally:
            process.terminate()
            process.wait(timeout=120)


if __name__ == "__main__":
    main()
