"""Several `trajlake collect` processes on one lake, with a compaction and a reader running at once.

Two real collector processes take load from their own clients while `compact` rewrites
the spans table and a reader counts it in a loop. Every acknowledged span must be in the
lake exactly once at the end, and the count the reader sees must never dip or double.
The same runs against a lake on S3 (a moto server), where delta-rs commits with
conditional writes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from flows.background import free_port
from store.catalog.connection import connect
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from tests.conftest import s3_lake_at
from tests.reliability.test_durability import random_request, start

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

SECONDS = 8


def run_together(lake: Lake, env: dict[str, str] | None = None) -> None:
    ports = [free_port(), free_port()]
    processes = [start(lake, port, env) for port in ports]
    acknowledged: set[tuple[str, str]] = set()
    counts: list[int] = []
    problems: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(port: int) -> None:
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                body, ids = random_request(20)
                response = http.post(
                    f"http://127.0.0.1:{port}/v1/traces",
                    content=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                if response.status_code == 200:
                    trace = body_trace_id(body)
                    with lock:
                        acknowledged.update((trace, span) for span in ids)
                elif response.status_code != 503:  # back-pressure is allowed, and retried by real clients
                    problems.append(f"HTTP {response.status_code}: {response.text[:200]}")

    def reader() -> None:
        while not stop.is_set():
            con = connect(lake)
            total, distinct = con.execute(
                "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans"
            ).fetchone()
            con.close()
            if total != distinct:
                problems.append(f"a reader saw {total} rows for {distinct} keys")
            if counts and total < counts[-1]:
                problems.append(f"the count dipped from {counts[-1]} to {total}")
            counts.append(total)
            time.sleep(0.2)

    def compactor() -> None:
        while not stop.is_set():
            compact(lake, CompactConfig(tables=("spans",), min_files=3))
            time.sleep(0.5)

    threads = [threading.Thread(target=client, args=(port,)) for port in ports for _ in range(2)]
    threads += [threading.Thread(target=reader), threading.Thread(target=guard(compactor, problems))]
    for thread in threads:
        thread.start()
    time.sleep(SECONDS)
    deadline = time.monotonic() + 60  # a loaded machine: let the reader look a few times
    while len(counts) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    for process in processes:
        process.send_signal(signal.SIGTERM)  # a graceful stop flushes what is spooled
        assert process.wait(timeout=120) == 0, (
            process.stderr.read().decode()[-2000:] if process.stderr else ""
        )

    assert not problems, problems[:5]
    con = connect(lake)
    stored = con.execute("SELECT trace_id, span_id FROM spans").fetchall()
    assert len(stored) == len(set(stored))  # none doubled
    missing = acknowledged - set(stored)
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"
    assert len(acknowledged) > 1000 and len(counts) >= 3


def body_trace_id(body: bytes) -> str:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    return request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()


def guard(work: Callable[[], None], problems: list[str]) -> Callable[[], None]:
    def run() -> None:
        try:
            work()
        except Exception as exc:  # reported by the test, not lost in a thread
            problems.append(f"{type(exc).__name__}: {exc}")

    return run


def test_two_collectors_a_compaction_and_a_reader_on_one_local_lake(lake: Lake) -> None:
    run_together(lake)


@pytest.mark.slow
def test_two_collectors_a_compaction_and_a_reader_on_one_s3_lake(s3_endpoint: str, tmp_path: Path) -> None:
    lake = s3_lake_at(s3_endpoint, "lake-collectors-together")
    aws = {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # where collectors of a remote lake spool
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    run_together(lake, aws)
