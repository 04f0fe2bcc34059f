"""Tiny builders of real OTLP requests (through the SDK's own encoder) for the collector tests."""

from __future__ import annotations

import gzip
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def chat_trace(
    n_chats: int = 1, *, content: str = "hello", service: str = "test-agent"
) -> ExportTraceServiceRequest:
    """One trace: an `invoke_agent` root with `n_chats` GenAI chat spans under it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent tester") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        history: list[dict[str, Any]] = []
        for i in range(n_chats):
            history.append({"role": "user", "parts": [{"type": "text", "content": f"{content} {i}"}]})
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "m")
                span.set_attribute("gen_ai.input.messages", json.dumps(history))
                answer = {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": f"answer {i}"}],
                    "finish_reason": "stop",
                }
                span.set_attribute("gen_ai.output.messages", json.dumps([answer]))
                span.set_attribute("gen_ai.usage.input_tokens", 10)
                span.set_attribute("gen_ai.usage.output_tokens", 2)
            history.append({k: v for k, v in answer.items() if k != "finish_reason"})
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def as_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON as the specification writes it: hex ids, camelCase keys."""
    document = json_format.MessageToDict(request)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        import base64

                        span[key] = base64.b64decode(span[key]).hex()
    return document


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def trace_ids(request: ExportTraceServiceRequest) -> set[str]:
    return {s.trace_id.hex() for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
