"""In-process export: `LakeSpanExporter` and `instrument()` write through the collector's own parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import store
from ingest import LakeSpanExporter, instrument
from ingest.errors import InstrumentError
from ingest.otlp.convert import spans_from_request
from tests.ingest.conftest import sql

ROOT = Path(__file__).resolve().parents[2]


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


def test_exporter_rows_equal_the_http_path_rows(lake: store.Lake) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(LakeSpanExporter(lake)))
    record(provider)
    provider.force_flush()
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


def test_force_flush_assembles_traces_still_waiting_for_their_root(lake: store.Lake) -> None:
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
    assert sql(lake, "SELECT status FROM trajectories") == [{"status": "ok"}]


def test_instrument_needs_exactly_one_destination() -> None:
    with pytest.raises(InstrumentError, match="exactly one destination"):
        instrument()
    with pytest.raises(InstrumentError):
        instrument(lake="x", endpoint="http://127.0.0.1:1")


def test_instrument_in_process_with_the_real_openai_client(lake: store.Lake) -> None:
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
    from tests.ingest.conftest import wait_for

    rows = wait_for(
        lambda: (
            collector.lake.has_table("trajectories")
            and sql(collector.lake, "SELECT final_output, metadata FROM trajectories")
        )
    )
    assert rows[0]["final_output"] == "noted"
    assert json.loads(rows[0]["metadata"])["service_name"] == "remote-agent"
