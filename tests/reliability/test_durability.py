"""Durability: a 200 means on disk. kill -9 under load loses no acknowledged span, leaves no partial file.

Also the spool's own recovery rules: a torn tail (a record whose write never finished,
so was never acknowledged) is ignored, complete records before it are kept.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flows.background import free_port
from ingest.otlp.collector import Collector
from ingest.otlp.config import CollectorConfig
from ingest.otlp.spool import HEADER, MAGIC, Spool, decode_table, encode_table, read_segment
from store.catalog.versions import snapshot
from store.lake import Lake
from tests.ingest.conftest import STARTED, sql, wait_for

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ROOT = Path(__file__).resolve().parents[2]


def random_request(n: int) -> tuple[bytes, list[str]]:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    trace_id = secrets.token_bytes(16)
    ids = []
    now = time.time_ns()
    for i in range(n):
        span = scope.spans.add()
        span.trace_id, span.span_id = trace_id, secrets.token_bytes(8)
        span.name = f"chat {i}"
        span.start_time_unix_nano, span.end_time_unix_nano = now, now + 1000
        attr = span.attributes.add()
        attr.key, attr.value.string_value = "gen_ai.input.messages", "x" * 2000
        ids.append(span.span_id.hex())
    return request.SerializeToString(), ids


def start(
    lake: Lake, port: int, env: dict[str, str] | None = None, args: tuple[str, ...] = ("--no-assemble",)
) -> subprocess.Popen[bytes]:
    """A `trajlake collect` process on `port` (reaped after the test), once it answers /health."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "collect",
            "--lake",
            lake.root,
            "--port",
            str(port),
            "--flush-seconds",
            "0.3",
            *args,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    STARTED.append(process)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            return False

    wait_for(healthy, timeout=60, interval=0.2)
    return process


def test_kill_9_under_load_loses_no_acknowledged_span(lake: Lake) -> None:
    port = free_port()
    process = start(lake, port)
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                body, ids = random_request(50)
                try:
                    response = client.post(
                        f"http://127.0.0.1:{port}/v1/traces",
                        content=body,
                        headers={"Content-Type": "application/x-protobuf"},
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    with lock:
                        acknowledged.extend(ids)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 3000, timeout=60, interval=0.05)
    process.send_signal(signal.SIGKILL)  # mid-load: requests in flight, segments half-written
    process.wait()
    stop.set()
    for thread in threads:
        thread.join()
    # No partial commit is visible: every file of the current table version reads in full.
    for path in snapshot(lake)["spans"].files:
        pq.read_table(path)
    restarted = start(lake, port)  # recovers the spool
    restarted.send_signal(signal.SIGINT)  # graceful stop flushes everything
    assert restarted.wait(timeout=120) in (
        0,
        130,
        -signal.SIGINT,
    )  # uvicorn re-raises SIGINT after a clean stop
    stored = {r["span_id"] for r in sql(lake, "SELECT span_id FROM spans")}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"
    assert not list((Path(lake.root) / "_spool").rglob("seg-*.wal"))


def test_spool_recovery_ignores_a_torn_tail_and_keeps_complete_records(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=1 << 30, segment_seconds=3600)
    spool.start()
    tables = [pa.table({"n": [i, i + 1]}) for i in (0, 10)]
    for table in tables:
        spool.append(encode_table(table)).result(timeout=10)
    spool.close()
    segment = spool.segments()[0]
    payload = encode_table(pa.table({"n": [99]}))
    with segment.open("ab") as handle:  # a record whose write was cut short by a crash
        handle.write(HEADER.pack(MAGIC, len(payload), 0) + payload[: len(payload) // 2])
    records, end = read_segment(segment)
    assert [decode_table(r).column("n").to_pylist() for r in records] == [[0, 1], [10, 11]]
    assert end < segment.stat().st_size


def test_spool_group_commit_resolves_every_future_and_seals_by_size(tmp_path: Path) -> None:
    sealed: list[int] = []
    spool = Spool(tmp_path, segment_bytes=2000, segment_seconds=3600, on_sealed=lambda: sealed.append(1))
    spool.start()
    futures = [spool.append(encode_table(pa.table({"n": list(range(50))}))) for _ in range(20)]
    for future in futures:
        future.result(timeout=10)
    spool.close()
    assert sealed and spool.committed_records == 20
    rows = sum(decode_table(r).num_rows for p in spool.segments() for r in read_segment(p)[0])
    assert rows == 20 * 50


def test_spool_records_survive_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write to a file may take fewer bytes than offered (a signal, a filling disk): the rest of the
    # group commit must follow in order, or the segment would hold torn records behind an ack.
    real_writev = os.writev

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        return real_writev(fd, [memoryview(buffers[0])[:7]])

    monkeypatch.setattr(os, "writev", short_writev)
    spool = Spool(tmp_path, segment_bytes=1 << 30, segment_seconds=3600)
    spool.start()
    for i in range(3):
        spool.append(encode_table(pa.table({"n": list(range(i, i + 40))}))).result(timeout=10)
    spool.close()
    (segment,) = spool.segments()
    records, end = read_segment(segment)
    assert [decode_table(r).column("n").to_pylist() for r in records] == [
        list(range(i, i + 40)) for i in range(3)
    ]
    assert end == segment.stat().st_size


def test_an_unwritable_segment_is_kept_aside_and_does_not_block_the_spool(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(flush_seconds=3600)
    runtime = collector.runtime
    # A segment whose record decodes to rows the lake rejects (no start_time: a required column).
    bad = pa.table({"trace_id": ["ab" * 16], "span_id": ["cd" * 8], "source": ["otel"]})
    runtime.spool.append(bad).result(timeout=10)
    body, ids = random_request(3)
    assert (
        httpx.post(
            f"{collector.url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
        ).status_code
        == 200
    )
    runtime.flush()
    assert {r["span_id"] for r in sql(collector.lake, "SELECT span_id FROM spans")} == set(ids)
    failed = list((Path(collector.lake.root) / "_spool").glob("c-*/*.failed"))
    assert len(failed) == 1 and "start_time" in httpx.get(f"{collector.url}/health").json()["last_error"]


def test_flush_after_stop_returns_at_once(tmp_path: Path) -> None:
    runtime = Collector(CollectorConfig(lake=str(tmp_path / "lake"), assemble=False))
    runtime.start()
    runtime.spool.append(pa.table({"x": [1]})).result(timeout=10)  # rejected rows: kept aside
    runtime.stop()
    started = time.monotonic()
    assert runtime.flush() == 0 and time.monotonic() - started < 5


def test_spool_survives_its_directory_being_removed(tmp_path: Path) -> None:
    import shutil

    spool = Spool(tmp_path / "spool", segment_bytes=1 << 30, segment_seconds=3600)
    spool.start()
    spool.append(encode_table(pa.table({"n": [1]}))).result(timeout=10)
    shutil.rmtree(tmp_path / "spool")  # e.g. a careless /tmp cleaner
    lost = spool.append(encode_table(pa.table({"n": [2]})))
    try:
        lost.result(timeout=10)
        raise AssertionError("a write into a removed segment must not be acknowledged")
    except FileNotFoundError:
        pass
    spool.append(encode_table(pa.table({"n": [3]}))).result(timeout=10)  # the writer lives on
    spool.close()
    rows = [decode_table(r).column("n").to_pylist() for p in spool.segments() for r in read_segment(p)[0]]
    # Only what is really on disk counts as pending: nothing phantom is left to block requests.
    assert rows == [[3]] and spool.pending_bytes == sum(p.stat().st_size for p in spool.segments())
