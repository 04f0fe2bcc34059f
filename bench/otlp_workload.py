"""The ingest benchmarks' traffic: realistic GenAI agent traces as OTLP/protobuf request bodies.

Each trace is an `invoke_agent` root with three user turns, each a tool-calling chat, the
tool's span and an answering chat (10 spans), with the multi-KB histories real agents send.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

SPANS_PER_REQUEST = 100
SPANS_PER_TRACE = 10  # agent root + 6 chat + 3 tool spans

SYSTEM = "You are a meticulous support agent for an online store. " * 8
USER_TURNS = [
    "My order 10{0} arrived damaged, the box was crushed and two glasses are broken. What can I do?",
    "I would like a refund to my original payment method rather than store credit, if possible.",
    "Also, can you check whether the replacement set is in stock in the blue colour?",
]


def _attr(span: Any, key: str, value: Any) -> None:
    kv = span.attributes.add()
    kv.key = key
    if isinstance(value, str):
        kv.value.string_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.int_value = value


def build_request(n_traces: int, seed: int) -> ExportTraceServiceRequest:
    """`n_traces` realistic agent traces (10 spans each) in one OTLP request."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    kv = resource.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "support-agent"
    scope = resource.scope_spans.add()
    scope.scope.name = "opentelemetry.instrumentation.openai_v2"
    now = time.time_ns()
    for t in range(n_traces):
        trace_id = secrets.token_bytes(16)
        root_id = secrets.token_bytes(8)
        history: list[dict[str, Any]] = [{"role": "system", "parts": [{"type": "text", "content": SYSTEM}]}]
        spans = []
        for turn in range(3):
            history.append(
                {"role": "user", "parts": [{"type": "text", "content": USER_TURNS[turn].format(seed + t)}]}
            )
            for step in range(2):
                chat = scope.spans.add()
                spans.append(chat)
                chat.name = "chat gpt-4o-mini"
                chat.kind = 3
                chat.trace_id, chat.span_id, chat.parent_span_id = trace_id, secrets.token_bytes(8), root_id
                chat.start_time_unix_nano = now + (turn * 2 + step) * 1_000_000
                chat.end_time_unix_nano = chat.start_time_unix_nano + 800_000
                _attr(chat, "gen_ai.operation.name", "chat")
                _attr(chat, "gen_ai.provider.name", "openai")
                _attr(chat, "gen_ai.request.model", "gpt-4o-mini")
                _attr(chat, "gen_ai.response.model", "gpt-4o-mini-2024-07-18")
                _attr(chat, "gen_ai.request.temperature", 0.2)
                _attr(chat, "gen_ai.usage.input_tokens", 900 + turn * 200)
                _attr(chat, "gen_ai.usage.output_tokens", 60)
                _attr(chat, "gen_ai.response.id", f"chatcmpl-{secrets.token_hex(8)}")
                _attr(chat, "gen_ai.input.messages", json.dumps(history))
                if step == 0:
                    out = {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": f"call_{turn}",
                                "name": "lookup_order",
                                "arguments": {"order_id": f"10{seed + t}"},
                            }
                        ],
                        "finish_reason": "tool_call",
                    }
                else:
                    out = {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": "I am sorry about that. " * 6}],
                        "finish_reason": "stop",
                    }
                _attr(chat, "gen_ai.output.messages", json.dumps([out]))
                history.append({k: v for k, v in out.items() if k != "finish_reason"})
                if step == 0:
                    tool = scope.spans.add()
                    spans.append(tool)
                    tool.name = "execute_tool lookup_order"
                    tool.trace_id, tool.span_id, tool.parent_span_id = (
                        trace_id,
                        secrets.token_bytes(8),
                        root_id,
                    )
                    tool.start_time_unix_nano = chat.end_time_unix_nano + 10
                    tool.end_time_unix_nano = tool.start_time_unix_nano + 100_000
                    result = json.dumps(
                        {"order": f"10{seed + t}", "status": "delivered", "items": ["glass"] * 6}
                    )
                    _attr(tool, "gen_ai.operation.name", "execute_tool")
                    _attr(tool, "gen_ai.tool.name", "lookup_order")
                    _attr(tool, "gen_ai.tool.call.id", f"call_{turn}")
                    _attr(tool, "gen_ai.tool.call.result", result)
                    history.append(
                        {
                            "role": "tool",
                            "parts": [
                                {"type": "tool_call_response", "id": f"call_{turn}", "response": result}
                            ],
                        }
                    )
        root = scope.spans.add()
        root.name = "invoke_agent support"
        root.trace_id, root.span_id = trace_id, root_id
        root.start_time_unix_nano, root.end_time_unix_nano = now, now + 10_000_000
        _attr(root, "gen_ai.operation.name", "invoke_agent")
        _attr(root, "gen_ai.agent.name", "support")
    return request


def make_bodies(count: int) -> list[bytes]:
    return [
        build_request(SPANS_PER_REQUEST // SPANS_PER_TRACE, i * 100).SerializeToString() for i in range(count)
    ]
