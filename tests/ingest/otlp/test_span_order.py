"""A span that ends before it starts is refused (OTLP `partial_success`), not stored as sent.

Its duration would be negative, and clamping it to zero would hide the sender's clock
problem behind a plausible latency; refusing it names the span and both times.
"""

from __future__ import annotations

import json
import time

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ingest.otlp.convert import spans_from_request
from ingest.otlp.sdk_spans import spans_from_sdk
from tests.ingest.conftest import sql
from tests.ingest.otlp_cases import as_json, chat_trace

JS = {"Content-Type": "application/json"}


def reversed_chat_trace():  # type: ignore[no-untyped-def]
    """`chat_trace(2)` with the first chat span's end moved to a second before its start."""
    request = chat_trace(2)
    chats = [s for s in request.resource_spans[0].scope_spans[0].spans if s.name == "chat m"]
    chats[0].end_time_unix_nano = chats[0].start_time_unix_nano - 1_000_000_000
    return request, chats[0]


def test_conversion_rejects_a_span_that_ends_before_it_starts() -> None:
    request, bad = reversed_chat_trace()
    converted = spans_from_request(request)
    assert converted.rejected == 1 and converted.table.num_rows == 2
    assert f"end time {bad.end_time_unix_nano} ns is before start time {bad.start_time_unix_nano} ns" in (
        converted.error_message
    )
    assert bad.span_id.hex() not in converted.table.column("span_id").to_pylist()


def test_a_span_ending_within_its_start_microsecond_is_still_refused() -> None:
    # The lake keeps microseconds: a 1 ns inversion would be stored as equal times.
    request = chat_trace(1)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.end_time_unix_nano = span.start_time_unix_nano - 1
    assert spans_from_request(request).rejected == 1


def test_a_span_without_an_end_is_kept() -> None:
    request = chat_trace(1)
    request.resource_spans[0].scope_spans[0].spans[0].end_time_unix_nano = 0  # still running
    assert spans_from_request(request).rejected == 0


def test_the_collector_answers_partial_success_for_it(collector) -> None:  # type: ignore[no-untyped-def]
    request, bad = reversed_chat_trace()
    response = httpx.post(f"{collector.url}/v1/traces", content=json.dumps(as_json(request)), headers=JS)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "is before start time" in partial["errorMessage"]
    collector.runtime.flush()
    stored = {r["span_id"] for r in sql(collector.lake, "SELECT span_id FROM spans")}
    assert len(stored) == 2 and bad.span_id.hex() not in stored


def test_the_in_process_exporter_refuses_it_too() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    now = time.time_ns()
    tracer.start_span("backwards", start_time=now).end(end_time=now - 1_000_000_000)
    tracer.start_span("fine").end()
    converted = spans_from_sdk(exporter.get_finished_spans())
    assert converted.rejected == 1 and converted.table.num_rows == 1
    assert "span `backwards`: end time" in converted.error_message
