"""In-process export: `LakeSpanExporter` and `instrument()` write through the collector's own parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ingest import LakeSpanExporter, instrument
from ingest.errors import InstrumentError
from ingest.otlp.convert import spans_from_request
from ingest.otlp.sdk_spans import spans_from_sdk
from store.catalog.versions import snapshot
from store.lake import Lake
from tests.ingest.conftest import sql, wait_for

ROOT = Path(__file__).resolve().parents[3]


def record(provider: TracerProvider, secret: str = "sk-proj-abcdefghijklmnopqrstuvwx") -> None:
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("chat m") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "m")
            span.set_attribute(
                "gen_ai.input.messages",
                json.dumps(
                    [
                        {
                            "role": "user",
                            "parts": [
                                {"type": "text", "content": f"my key is {secret}, mail bob@example.com"}
                            ],
                        }
                    ]
                ),
            )
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "noted"}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            )


def test_exporter_rows_equal_the_http_path_rows(lake: Lake) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = LakeSpanExporter(lake)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(exporter.flush_processor())
    record(provider)
    provider.force_flush()  # reaches the exporter through its flush processor
    expected = spans_from_request(encode_spans(memory.get_finished_spans())).table
    stored = sql(lake, "SELECT span_id, name, attributes FROM spans ORDER BY span_id")
    assert [r["span_id"] for r in stored] == sorted(expected.column("span_id").to_pylist())
    (row,) = sql(lake, "SELECT final_output, messages FROM trajectories")
    assert row["final_output"] == "noted"
    # Secrets never reach the lake; emails stay unless configured.
    assert (
        "[REDACTED:api_key]" in row["messages"][0]["content"]
        and "bob@example.com" in row["messages"][0]["content"]
    )
    assert "sk-proj" not in json.dumps(stored)


def test_force_flush_assembles_traces_still_waiting_for_their_root(lake: Lake) -> None:
    exporter = LakeSpanExporter(lake)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    root = tracer.start_span("invoke_agent a")
    from opentelemetry import trace

    with trace.use_span(root), tracer.start_as_current_span("chat m") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
    assert not lake.has_table("trajectories")  # root still open: nothing assembled yet
    exporter.force_flush()  # (span processors do not forward force_flush to exporters)
    assert sql(lake, "SELECT status FROM trajectories") == [{"status": "truncated"}]
    root.end()  # the root arrives: re-assembled, the newer row wins
    exporter.force_flush()
    assert sql(lake, "SELECT status FROM trajectories") == [{"status": "ok"}]
    exporter.shutdown()


def test_instrument_needs_exactly_one_destination() -> None:
    with pytest.raises(InstrumentError, match="exactly one destination"):
        instrument()
    with pytest.raises(InstrumentError):
        instrument(lake="x", endpoint="http://127.0.0.1:1")


def test_instrument_in_process_with_the_real_openai_client(lake: Lake) -> None:
    # A fresh interpreter: instrument() patches `openai` globally and sets the global provider.
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from ingest import instrument
from tests.ingest.fake_openai import create_app, serve_in_thread, run_agent
provider = instrument(lake={lake.root!r}, service_name="demo-agent")
with serve_in_thread(create_app()) as url:
    tracer = provider.get_tracer("demo")
    with tracer.start_as_current_span("invoke_agent demo") as span:
        span.set_attribute("gen_ai.operation.name", "invoke_agent")
        run_agent(url, tracer=tracer)
# No explicit flush: the batched spans must still reach the lake when the process exits.
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = sql(lake, "SELECT agent_name, model, final_output, len(messages) AS n FROM trajectories")
    assert row == {
        "agent_name": "demo",
        "model": "gpt-4o-mini-2024-07-18",
        "final_output": "It is rainy and 14 degrees in Paris.",
        "n": 5,
    }
    assert sql(lake, "SELECT DISTINCT service_name FROM spans") == [{"service_name": "demo-agent"}]


def test_instrument_with_an_endpoint_exports_to_a_running_collector(collector) -> None:  # type: ignore[no-untyped-def]
    provider = instrument(
        endpoint=collector.url,
        service_name="remote-agent",
        set_global=False,
        instrument_openai=False,
        headers={"x-test": "1"},
    )
    record(provider)
    assert provider.force_flush()
    provider.shutdown()

    rows = wait_for(
        lambda: (
            collector.lake.has_table("trajectories")
            and sql(collector.lake, "SELECT final_output, metadata FROM trajectories")
        )
    )
    assert rows[0]["final_output"] == "noted"
    assert json.loads(rows[0]["metadata"])["service_name"] == "remote-agent"


def sdk_spans_of_every_shape() -> list[ReadableSpan]:
    """Spans with every attribute type, events, links, errors, kinds and resources."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import SpanKind, Status, StatusCode

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shapes", "deployment": "prod"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("shapes-scope")
    with tracer.start_as_current_span("invoke_agent shapes", kind=SpanKind.SERVER) as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        for kind in (SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER):
            with tracer.start_as_current_span(f"step {kind.name}", kind=kind) as span:
                span.set_attributes(
                    {
                        "text": 'héllo "quoted" \n line',
                        "empty": "",
                        "count": 7,
                        "big": 2**62,
                        "ratio": 0.25,
                        "flag": False,
                        "nan": float("nan"),
                        "inf": float("-inf"),
                        "words": ["a", "b"],
                        "numbers": [1.5, float("inf")],
                        "ints": [1, 2, 3],
                        "flags": [True, False],
                    }
                )
                span.add_event("gen_ai.choice", {"index": 0, "message": '{"role": "assistant"}'})
                span.add_event("bare")
                if kind == SpanKind.CLIENT:
                    span.set_status(Status(StatusCode.ERROR, "tool failed"))
                elif kind == SpanKind.PRODUCER:
                    span.set_status(Status(StatusCode.OK))
        link = trace.Link(root.get_span_context(), {"why": "retry"})
        with tracer.start_as_current_span("linked", links=[link]):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_sdk_spans_convert_to_exactly_the_rows_of_their_otlp_encoding() -> None:
    from datetime import UTC, datetime

    spans = sdk_spans_of_every_shape()
    at = datetime.now(UTC)  # one arrival time for both paths; the spans were just made (never ahead of it)
    direct = spans_from_sdk(spans, received_at=at).table
    via_protobuf = spans_from_request(encode_spans(spans), received_at=at).table
    assert direct.num_rows == len(spans) == 6
    assert direct.schema == via_protobuf.schema
    assert direct.to_pylist() == via_protobuf.to_pylist()


def test_exports_are_batched_into_few_lake_writes_and_survive_a_crash(lake: Lake, tmp_path: Path) -> None:
    # A process exports 40 batches and dies without shutting down: nothing reaches the lake
    # file by file, and the next exporter on the lake adopts the spool and writes it all.
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.ingest.otlp.test_exporter import sdk_spans_of_every_shape
from ingest import LakeSpanExporter
exporter = LakeSpanExporter({lake.root!r}, flush_seconds=3600, assemble=False)
spans = sdk_spans_of_every_shape()
for _ in range(40):
    spans = sdk_spans_of_every_shape()
    assert exporter.export(spans).name == "SUCCESS"
os._exit(0)  # killed: no shutdown, no flush
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not lake.has_table("spans")  # spooled, not written one export at a time
    exporter = LakeSpanExporter(lake, assemble=False)  # adopts the dead exporter's spool
    assert exporter.force_flush()
    exporter.shutdown()
    assert sql(lake, "SELECT count(*) AS n FROM spans") == [{"n": 40 * 6}]
    assert len(snapshot(lake)["spans"].files) <= 2
