"""No shape of telemetry escapes assembly as an exception: mutations of the real recordings.

Hypothesis takes the spans of real framework recordings (`tests/ingest/frameworks`) and
mutates attribute and event values: strings where objects are expected, objects where
strings are, nulls, wrong types, huge values, truncated JSON, missing ids and parents.
Every trace then either assembles or is a recorded failure with its reason; the batch
itself never raises, and the good traces beside a broken one still assemble.
"""

from __future__ import annotations

import datetime
import json
import re
import zoneinfo
from functools import cache
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingest.assembly import assemble
from ingest.otlp.convert import ROW_SCHEMA, logs_from_request, spans_from_request
from ingest.otlp.decode import decode_logs, decode_traces
from tests.ingest.frameworks.dump import raw_body
from tests.ingest.frameworks.replay import HERE

RECORDINGS = (
    "strands-default",
    "strands-latest",
    "google-adk-events",
    "langgraph-openinference",
    "openai-agents-chat",
    "smolagents-openinference",
    "vercel-ai-sdk-legacy",
    "langfuse-sdk",
    "langgraph-traceloop",
    "pydantic-ai-native",
)


@cache
def recorded_rows(name: str) -> tuple[dict[str, Any], ...]:
    """The `spans` rows the collector makes of a recording's traces and logs."""
    folder = HERE / "recordings" / name
    manifest = json.loads((folder / "manifest.json").read_text())
    tables = []
    for entry in manifest["requests"]:
        kind = entry["path"].rsplit("/", 1)[-1]
        if entry["method"] != "POST" or not entry["body_file"] or kind not in ("traces", "logs"):
            continue
        body = raw_body(folder / entry["body_file"], entry.get("content_encoding"))
        decode, convert = (
            (decode_traces, spans_from_request) if kind == "traces" else (decode_logs, logs_from_request)
        )
        tables.append(convert(decode(body, entry["content_type"], None, 1 << 30)).table)
    return tuple(pa.concat_tables(tables).to_pylist())


ODD_VALUES = st.one_of(
    st.none(),
    st.sampled_from(["", "{", "[1, 2", "null", "[]", "{}", '{"role": 5}', '[{"parts": 3}]', '"text"', "NaN"]),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=40),
    st.just("x" * 200_000),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5)), max_size=4),
    st.dictionaries(
        st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=3
    ),
    st.just([[[[[[["deep"]]]]]]]),
)


def _parsed(text: str | None, default: Any) -> Any:
    try:
        value = json.loads(text or "null")
    except ValueError:  # an earlier mutation broke the JSON text itself
        return default
    return value if isinstance(value, type(default)) else default


@st.composite
def mutated_spans(draw: st.DrawFn) -> list[dict[str, Any]]:
    name = draw(st.sampled_from(RECORDINGS))
    rows = [dict(r) for r in recorded_rows(name)]
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        row = draw(st.sampled_from(rows))
        target = draw(st.sampled_from(["attribute", "event", "event_attribute", "ids", "encoding"]))
        attributes = _parsed(row["attributes"], {})
        events = _parsed(row["events"], [])
        if target == "attribute" and attributes:
            key = draw(st.sampled_from(sorted(attributes)))
            if draw(st.booleans()):
                attributes[key] = draw(ODD_VALUES)
            else:
                del attributes[key]
        elif target == "event" and events:
            index = draw(st.integers(min_value=0, max_value=len(events) - 1))
            events[index] = draw(
                st.one_of(ODD_VALUES, st.just({"name": "gen_ai.choice", "attributes": "oops"}))
            )
        elif target == "event_attribute" and any(isinstance(e, dict) for e in events):
            # An earlier mutation may have made an event (or its attributes) something else.
            event = draw(st.sampled_from([e for e in events if isinstance(e, dict)]))
            if not isinstance(event.get("attributes"), dict):
                event["attributes"] = {}
            keys = sorted(event["attributes"]) or ["message"]
            event["attributes"][draw(st.sampled_from(keys))] = draw(ODD_VALUES)
        elif target == "ids":
            row[draw(st.sampled_from(["parent_span_id", "span_id"]))] = draw(
                st.sampled_from([None, row["trace_id"][:16], "0" * 16, row["span_id"]])
            )
            row["span_id"] = row["span_id"] or "f" * 16
        else:  # the stored text itself is not the JSON it should be
            row[draw(st.sampled_from(["attributes", "events"]))] = draw(
                st.sampled_from(["", "{", "[", "5", "null"])
            )
            continue
        row["attributes"] = json.dumps(attributes, allow_nan=True, default=str)
        row["events"] = json.dumps(events, allow_nan=True, default=str)
    return rows


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(mutated_spans())
@example(
    rows=[
        {
            "trace_id": "a1f543e1ba33cae37a1b6ac3f9c33e73",
            "span_id": "7731ea052c826d27",
            "source": "otel",
            "name": "ai.toolCall",
            "kind": "INTERNAL",
            "parent_span_id": "bdcbba7cc8324918",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 717000, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 718105, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "ai",
            "attributes": '{"operation.name": "ai.toolCall weather-agent", "resource.name": "weather-agent", "ai.operationId": "ai.toolCall", "ai.telemetry.functionId": "weather-agent", "ai.toolCall.name": 1, "ai.toolCall.id": "call_weather_paris_1", "ai.toolCall.args": "{\\"city\\":\\"Paris\\"}", "ai.toolCall.result": "\\"18C and sunny in Paris\\""}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus","os.type":"linux","os.version":"6.18.44-fc-v782","host.name":"vm","host.arch":"amd64","host.id":"3d1219c7c4c5404aaa1f6d2a48adfda4","process.pid":27990,"process.executable.name":"node","process.executable.path":"/usr/bin/node","process.command_args":["/usr/bin/node","/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs"],"process.runtime.version":"20.20.2","process.runtime.name":"nodejs","process.runtime.description":"Node.js","process.command":"/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs","process.owner":"root","service.instance.id":"22500932-f743-446d-9518-4635a12de3f9","telemetry.sdk.language":"nodejs","telemetry.sdk.name":"opentelemetry","telemetry.sdk.version":"3.1.0"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 13, 0, 13, 772722, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "a1f543e1ba33cae37a1b6ac3f9c33e73",
            "span_id": "bdcbba7cc8324918",
            "source": "otel",
            "name": "ai.generateText.doGenerate",
            "kind": "INTERNAL",
            "parent_span_id": "3b4463116a20db69",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 640000, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 725071, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "ai",
            "attributes": '{"operation.name": "ai.generateText.doGenerate weather-agent", "resource.name": "weather-agent", "ai.operationId": "ai.generateText.doGenerate", "ai.telemetry.functionId": "weather-agent", "ai.model.provider": "openai.chat", "ai.settings.temperature": 0.2, "ai.settings.maxRetries": 2, "ai.request.headers.user-agent": "ai-sdk-agent/tool-loop ai/7.0.173", "ai.prompt.messages": "[{\\"role\\":\\"system\\",\\"content\\":\\"You are a weather assistant. Use the get_weather tool to answer.\\"},{\\"role\\":\\"user\\",\\"content\\":[{\\"type\\":\\"text\\",\\"text\\":\\"What is the weather in Paris?\\"}]}]", "ai.prompt.tools": ["{\\"type\\":\\"function\\",\\"name\\":\\"get_weather\\",\\"inputSchema\\":{\\"$schema\\":\\"http://json-schema.org/draft-07/schema#\\",\\"type\\":\\"object\\",\\"properties\\":{\\"city\\":{\\"type\\":\\"string\\",\\"description\\":\\"The city to get the weather for.\\"}},\\"required\\":[\\"city\\"],\\"additionalProperties\\":false},\\"description\\":\\"Get the current weather for a city.\\"}"], "ai.prompt.toolChoice": "{\\"type\\":\\"auto\\"}", "gen_ai.system": "openai.chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.request.temperature": 0.2, "ai.response.finishReason": "tool-calls", "ai.response.text": "", "ai.response.toolCalls": "[{\\"toolCallId\\":\\"call_weather_paris_1\\",\\"toolName\\":\\"get_weather\\",\\"input\\":{\\"city\\":\\"Paris\\"}}]", "ai.response.id": "chatcmpl-scripted-1", "ai.response.model": "gpt-4o-mini-2024-07-18", "ai.response.timestamp": "2026-11-23T05:35:25.000Z", "ai.response.providerMetadata": "{\\"openai\\":{}}", "ai.usage.inputTokens": 40, "ai.usage.outputTokens": 12, "ai.usage.totalTokens": 52, "ai.usage.reasoningTokens": 0, "ai.usage.cachedInputTokens": 0, "ai.usage.inputTokenDetails.noCacheTokens": 40, "ai.usage.inputTokenDetails.cacheReadTokens": 0, "ai.usage.outputTokenDetails.textTokens": 12, "ai.usage.outputTokenDetails.reasoningTokens": 0, "gen_ai.response.finish_reasons": ["tool-calls"], "gen_ai.response.id": "chatcmpl-scripted-1", "gen_ai.response.model": "gpt-4o-mini-2024-07-18", "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 12}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus","os.type":"linux","os.version":"6.18.44-fc-v782","host.name":"vm","host.arch":"amd64","host.id":"3d1219c7c4c5404aaa1f6d2a48adfda4","process.pid":27990,"process.executable.name":"node","process.executable.path":"/usr/bin/node","process.command_args":["/usr/bin/node","/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs"],"process.runtime.version":"20.20.2","process.runtime.name":"nodejs","process.runtime.description":"Node.js","process.command":"/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs","process.owner":"root","service.instance.id":"22500932-f743-446d-9518-4635a12de3f9","telemetry.sdk.language":"nodejs","telemetry.sdk.name":"opentelemetry","telemetry.sdk.version":"3.1.0"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 13, 0, 13, 772722, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "a1f543e1ba33cae37a1b6ac3f9c33e73",
            "span_id": "f9df294456eaa507",
            "source": "otel",
            "name": "ai.generateText.doGenerate",
            "kind": "INTERNAL",
            "parent_span_id": "3b4463116a20db69",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 727000, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 746283, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "ai",
            "attributes": "",
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus","os.type":"linux","os.version":"6.18.44-fc-v782","host.name":"vm","host.arch":"amd64","host.id":"3d1219c7c4c5404aaa1f6d2a48adfda4","process.pid":27990,"process.executable.name":"node","process.executable.path":"/usr/bin/node","process.command_args":["/usr/bin/node","/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs"],"process.runtime.version":"20.20.2","process.runtime.name":"nodejs","process.runtime.description":"Node.js","process.command":"/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs","process.owner":"root","service.instance.id":"22500932-f743-446d-9518-4635a12de3f9","telemetry.sdk.language":"nodejs","telemetry.sdk.name":"opentelemetry","telemetry.sdk.version":"3.1.0"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 13, 0, 13, 772722, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "a1f543e1ba33cae37a1b6ac3f9c33e73",
            "span_id": "3b4463116a20db69",
            "source": "otel",
            "name": "ai.generateText",
            "kind": "INTERNAL",
            "parent_span_id": None,
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 634000, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 35, 25, 747094, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "ai",
            "attributes": '{"operation.name":"ai.generateText weather-agent","resource.name":"weather-agent","ai.operationId":"ai.generateText","ai.telemetry.functionId":"weather-agent","ai.model.provider":"openai.chat","ai.model.id":"gpt-4o-mini","ai.settings.temperature":0.2,"ai.settings.maxRetries":2,"ai.request.headers.user-agent":"ai-sdk-agent/tool-loop ai/7.0.173","ai.prompt":"{\\"system\\":\\"You are a weather assistant. Use the get_weather tool to answer.\\",\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"What is the weather in Paris?\\"}]}","ai.response.finishReason":"stop","ai.response.text":"It is 18C and sunny in Paris.","ai.response.toolCalls":"[{\\"toolCallId\\":\\"call_weather_paris_1\\",\\"toolName\\":\\"get_weather\\",\\"input\\":{\\"city\\":\\"Paris\\"}}]","ai.response.providerMetadata":"{\\"openai\\":{}}","ai.usage.inputTokens":110,"ai.usage.outputTokens":21,"ai.usage.totalTokens":131,"ai.usage.reasoningTokens":0,"ai.usage.cachedInputTokens":0,"ai.usage.inputTokenDetails.noCacheTokens":110,"ai.usage.inputTokenDetails.cacheReadTokens":0,"ai.usage.outputTokenDetails.textTokens":21,"ai.usage.outputTokenDetails.reasoningTokens":0}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus","os.type":"linux","os.version":"6.18.44-fc-v782","host.name":"vm","host.arch":"amd64","host.id":"3d1219c7c4c5404aaa1f6d2a48adfda4","process.pid":27990,"process.executable.name":"node","process.executable.path":"/usr/bin/node","process.command_args":["/usr/bin/node","/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs"],"process.runtime.version":"20.20.2","process.runtime.name":"nodejs","process.runtime.description":"Node.js","process.command":"/root/.cache/trajlake-corpus/node/vercel-ai-sdk-legacy/agent.mjs","process.owner":"root","service.instance.id":"22500932-f743-446d-9518-4635a12de3f9","telemetry.sdk.language":"nodejs","telemetry.sdk.name":"opentelemetry","telemetry.sdk.version":"3.1.0"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 13, 0, 13, 772722, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
    ],
).via("discovered failure")
@example(
    rows=[
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "312221b9058cc850",
            "source": "otel",
            "name": "generate_content openai/gpt-4o-mini",
            "kind": "INTERNAL",
            "parent_span_id": "3b76a616f3f13867",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 45, 15762, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 200914, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.operation.name":"generate_content","gen_ai.request.model":"openai/gpt-4o-mini","gen_ai.agent.name":"weather_agent","gen_ai.conversation.id":"conv-42","gcp.vertex.agent.event_id":"8af2caea-677d-4dfa-861e-4be4efe70919","gcp.vertex.agent.invocation_id":"e-0436dc39-1777-4190-91a4-3103ef381e6b","gen_ai.provider.name":"openai","gen_ai.response.finish_reasons":["stop"],"gen_ai.usage.input_tokens":40,"gen_ai.usage.output_tokens":12,"gen_ai.usage.cache_read.input_tokens":0,"gen_ai.tool.definitions":"[{\\"name\\":\\"get_weather\\",\\"description\\":\\"Get the current weather for a city.\\\\n\\\\nArgs:\\\\n    city: The city to get the weather for.\\",\\"parameters\\":null,\\"type\\":\\"function\\"}]"}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 118245, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "ce23a36888ce2d9b",
            "source": "otel",
            "name": "execute_tool get_weather",
            "kind": "INTERNAL",
            "parent_span_id": "3b76a616f3f13867",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 203891, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 205965, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.operation.name":"execute_tool","gen_ai.tool.description":"Get the current weather for a city.\\n\\nArgs:\\n    city: The city to get the weather for.","gen_ai.tool.name":"get_weather","gen_ai.tool.type":"FunctionTool","gen_ai.agent.name":"weather_agent","gen_ai.tool.call.id":"call_weather_paris_1","gcp.vertex.agent.event_id":"3f23f333-ba32-4754-af3c-cbf86ffe28b6"}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 118245, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "6ff96c18aec11497",
            "source": "otel",
            "name": "generate_content openai/gpt-4o-mini",
            "kind": "INTERNAL",
            "parent_span_id": "3b76a616f3f13867",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 208716, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 218899, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.operation.name": "generate_content", "gen_ai.request.model": 0, "gen_ai.agent.name": "weather_agent", "gen_ai.conversation.id": "conv-42", "gcp.vertex.agent.event_id": "d60d93a3-0386-4584-9b29-2627220dd27a", "gcp.vertex.agent.invocation_id": "e-0436dc39-1777-4190-91a4-3103ef381e6b", "gen_ai.provider.name": "openai", "gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 70, "gen_ai.usage.output_tokens": 9, "gen_ai.usage.cache_read.input_tokens": 0, "gen_ai.tool.definitions": "[{\\"name\\":\\"get_weather\\",\\"description\\":\\"Get the current weather for a city.\\\\n\\\\nArgs:\\\\n    city: The city to get the weather for.\\",\\"parameters\\":null,\\"type\\":\\"function\\"}]"}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 118245, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "3b76a616f3f13867",
            "source": "otel",
            "name": "invoke_agent weather_agent",
            "kind": "INTERNAL",
            "parent_span_id": "29882c36a9546281",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 44, 922343, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 220954, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.operation.name":"invoke_agent","gen_ai.agent.description":"Answers weather questions.","gen_ai.agent.name":"weather_agent","gen_ai.conversation.id":"conv-42"}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 118245, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "29882c36a9546281",
            "source": "otel",
            "name": "invoke_workflow weather_agent",
            "kind": "INTERNAL",
            "parent_span_id": None,
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 44, 901367, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 221653, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.operation.name":"invoke_workflow","gen_ai.conversation.id":"conv-42","gen_ai.workflow.name":"weather_agent"}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 118245, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "3c58d3a8ebd9e62d",
            "source": "otel",
            "name": "gen_ai.client.inference.operation.details",
            "kind": "LOG",
            "parent_span_id": "312221b9058cc850",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 200611, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 200611, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.agent.name":"weather_agent","gen_ai.conversation.id":"conv-42","gcp.vertex.agent.event_id":"8af2caea-677d-4dfa-861e-4be4efe70919","gcp.vertex.agent.invocation_id":"e-0436dc39-1777-4190-91a4-3103ef381e6b","gen_ai.provider.name":"openai","user.id":"user-7","gen_ai.response.finish_reasons":["stop"],"gen_ai.usage.input_tokens":40,"gen_ai.usage.output_tokens":12,"gen_ai.usage.cache_read.input_tokens":0,"gen_ai.input.messages":[{"role":"user","parts":[{"content":"What is the weather in Paris?","type":"text"}]}],"gen_ai.system_instructions":[{"content":"You are a weather assistant. Use the get_weather tool to answer.\\n\\nYou are an agent. Your internal name is \\"weather_agent\\". The description about you is \\"Answers weather questions.\\".","type":"text"}],"gen_ai.tool.definitions":[{"name":"get_weather","description":"Get the current weather for a city.\\n\\nArgs:\\n    city: The city to get the weather for.","parameters":{"properties":{"city":{"title":"City","type":"string"}},"required":["city"],"title":"get_weatherParams","type":"object"},"type":"function"}],"gen_ai.output.messages":[{"role":"assistant","parts":[{"id":"call_weather_paris_1","name":"get_weather","arguments":{"city":"Paris"},"type":"tool_call"}],"finish_reason":"stop"}],"log.time_unix_nano":1795411853200611730}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 119390, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
        {
            "trace_id": "db48fc3625ba92faa0c73290d8ca966a",
            "span_id": "dd55b76982433b92",
            "source": "otel",
            "name": "gen_ai.client.inference.operation.details",
            "kind": "LOG",
            "parent_span_id": "6ff96c18aec11497",
            "start_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 218698, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "end_time": datetime.datetime(
                2026, 11, 23, 5, 30, 53, 218698, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
            "status_code": "UNSET",
            "status_message": None,
            "service_name": "weather-agent-corpus",
            "scope_name": "gcp.vertex.agent",
            "attributes": '{"gen_ai.agent.name":"weather_agent","gen_ai.conversation.id":"conv-42","gcp.vertex.agent.event_id":"d60d93a3-0386-4584-9b29-2627220dd27a","gcp.vertex.agent.invocation_id":"e-0436dc39-1777-4190-91a4-3103ef381e6b","gen_ai.provider.name":"openai","user.id":"user-7","gen_ai.response.finish_reasons":["stop"],"gen_ai.usage.input_tokens":70,"gen_ai.usage.output_tokens":9,"gen_ai.usage.cache_read.input_tokens":0,"gen_ai.input.messages":[{"role":"user","parts":[{"content":"What is the weather in Paris?","type":"text"}]},{"role":"assistant","parts":[{"id":"call_weather_paris_1","name":"get_weather","arguments":{"city":"Paris"},"type":"tool_call"}]},{"role":"user","parts":[{"id":"call_weather_paris_1","response":{"result":"18C and sunny in Paris"},"type":"tool_call_response"}]}],"gen_ai.system_instructions":[{"content":"You are a weather assistant. Use the get_weather tool to answer.\\n\\nYou are an agent. Your internal name is \\"weather_agent\\". The description about you is \\"Answers weather questions.\\".","type":"text"}],"gen_ai.tool.definitions":[{"name":"get_weather","description":"Get the current weather for a city.\\n\\nArgs:\\n    city: The city to get the weather for.","parameters":{"properties":{"city":{"title":"City","type":"string"}},"required":["city"],"title":"get_weatherParams","type":"object"},"type":"function"}],"gen_ai.output.messages":[{"role":"assistant","parts":[{"content":"It is 18C and sunny in Paris.","type":"text"}],"finish_reason":"stop"}],"log.time_unix_nano":1795411853218698375}',
            "events": "[]",
            "resource": '{"service.name":"weather-agent-corpus"}',
            "received_at": datetime.datetime(
                2026, 11, 28, 14, 1, 10, 119390, tzinfo=zoneinfo.ZoneInfo(key="UTC")
            ),
        },
    ],
).via("discovered failure")
def test_mutated_recordings_assemble_or_fail_on_the_record_but_never_raise(
    rows: list[dict[str, Any]],
) -> None:
    good = [
        dict(r, trace_id="e" * 32) for r in recorded_rows("openai-agents-chat")
    ]  # an untouched trace beside
    result = assemble(pa.Table.from_pylist(rows + good, schema=ROW_SCHEMA))
    traces = {r["trace_id"] for r in rows} | {"e" * 32}
    failed = set(result.failures.column("trace_id").to_pylist())
    assembled = set(result.assembled_ids)
    assert failed | assembled == traces and not failed & assembled
    for failure in result.failures.to_pylist():
        assert failure["error_class"] and failure["stage"] == "assemble"
        # a short code beside the detail, not "TypeError: <message>"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", failure["reason"]), failure["reason"]
        assert failure["detail"] and ".py:" in failure["detail"]
    assert "e" * 32 in set(result.trajectories.column("trace_id").to_pylist())
