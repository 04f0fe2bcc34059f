"""A late span never shrinks a trajectory, whatever the restarts and the senders' clocks (issue 13, #3).

Real `trajlake collect` processes: a trace is assembled, the collector restarts (so the
record of assembled traces is gone), then more spans of the trace arrive, one dated two
days before the trace and one from a sender whose clock is 15 minutes fast. Re-assembly
must read every span of the trace, so the trajectory keeps all its messages and tokens.
"""

from __future__ import annotations

import hashlib
import signal
import time

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flows.background import free_port
from store.lake import Lake
from tests.ingest.conftest import sql, wait_for
from tests.ingest.otlp_cases import chat_trace
from tests.reliability.test_durability import start

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

PB = {"Content-Type": "application/x-protobuf"}
ASSEMBLING = ("--assemble", "--idle-timeout", "1", "--assemble-interval-s", "0.1")


def late_span(request: ExportTraceServiceRequest, name: str, start_ns: int) -> bytes:
    """One more span of the request's trace (a child of its root) starting at `start_ns`."""
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    root = next(s for s in spans if not s.parent_span_id)
    out = ExportTraceServiceRequest()
    out.resource_spans.add().CopyFrom(request.resource_spans[0])
    scope = out.resource_spans[0].scope_spans[0]
    del scope.spans[:]
    span = scope.spans.add()
    span.trace_id, span.parent_span_id = root.trace_id, root.span_id
    span.span_id = hashlib.blake2b(name.encode(), digest_size=8).digest()
    span.name = name
    span.start_time_unix_nano, span.end_time_unix_nano = start_ns, start_ns + 1_000_000
    return out.SerializeToString()


def trajectory(lake: Lake) -> list[dict]:  # type: ignore[type-arg]
    if not lake.has_table("trajectories"):
        return []
    return sql(
        lake,
        "SELECT trajectory_id, len(messages) AS messages, input_tokens, output_tokens, "
        "started_at FROM trajectories",
    )


def stop(process) -> None:  # type: ignore[no-untyped-def]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0


def test_late_spans_after_a_restart_keep_every_message_and_token(lake: Lake) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/traces"
    request = chat_trace(2)  # root + 2 chats: 4 messages, 20 input and 4 output tokens
    process = start(lake, port, args=ASSEMBLING)
    assert httpx.post(url, content=request.SerializeToString(), headers=PB).status_code == 200
    whole = wait_for(lambda: [t for t in trajectory(lake) if t["messages"] == 4])
    assert (whole[0]["input_tokens"], whole[0]["output_tokens"]) == (20, 4)
    stop(process)

    process = start(lake, port, args=ASSEMBLING)
    two_days_ago = time.time_ns() - 2 * 86_400 * 10**9
    fast_clock = time.time_ns() + 15 * 60 * 10**9
    for name, start_ns in (("lookup (old)", two_days_ago), ("lookup (fast clock)", fast_clock)):
        body = late_span(request, name, start_ns)
        assert httpx.post(url, content=body, headers=PB).status_code == 200
        query = f"SELECT count(*) AS n FROM spans WHERE name = '{name}'"
        wait_for(lambda q=query: sql(lake, q)[0]["n"] == 1)
    # Then for a trajectory written after the last span: the re-assembly that saw both.
    wait_for(
        lambda: (
            sql(
                lake,
                "SELECT count(*) AS n FROM trajectories t WHERE _written_at >= "
                "(SELECT max(_written_at) FROM spans)",
            )[0]["n"]
            >= 1
        ),
        timeout=30,
    )
    stop(process)
    rows = trajectory(lake)
    assert len(rows) == 1, rows  # one row per key, though the trajectory moved to an older `dt`
    assert (rows[0]["messages"], rows[0]["input_tokens"], rows[0]["output_tokens"]) == (4, 20, 4)
    assert rows[0]["started_at"].startswith(time.strftime("%Y-%m-%d", time.gmtime(two_days_ago / 1e9)))


def test_traces_flushed_but_not_assembled_at_a_kill_9_become_trajectories_on_restart(lake: Lake) -> None:
    """Issue 13, #2: the pending set is in memory; a restart recovers it from the lake."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/traces"
    never_assembling = ("--assemble", "--idle-timeout", "3600", "--assemble-interval-s", "3600")
    process = start(lake, port, args=never_assembling)
    requests = [chat_trace(2) for _ in range(20)]
    for request in requests:
        assert httpx.post(url, content=request.SerializeToString(), headers=PB).status_code == 200
    # Flushed, so durable (a fresh lake has no tables to query before the first commit).
    wait_for(lambda: lake.has_table("spans") and sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 60)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert trajectory(lake) == []  # killed before it assembled any of them

    process = start(lake, port, args=ASSEMBLING)
    wait_for(lambda: len(trajectory(lake)) == 20, timeout=60)
    stop(process)
    rows = trajectory(lake)
    assert all((r["messages"], r["input_tokens"], r["output_tokens"]) == (4, 20, 4) for r in rows), rows
