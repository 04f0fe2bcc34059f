"""Langfuse observations -> `spans` rows: ids, attribute names, both input shapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from ingest.assembly import span_dicts
from ingest.assembly.normalize import LLMCall, ToolCall, normalize_span
from ingest.langfuse.spans import observation_to_span, to_span_id, to_trace_id, trace_to_spans
from ingest.records import BadRecord
from store.conform import conform_batch
from store.schema import SPANS, table_spec

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)

V2_GENERATION = {
    "id": "a17e00000000beef",
    "traceId": "5b8efff798038103d269b633813fc60c",
    "type": "GENERATION",
    "parentObservationId": "9f1c000000000001",
    "name": "chat gpt-4o",
    "startTime": "2026-08-01T10:00:00Z",
    "endTime": "2026-08-01T10:00:01.200Z",
    "completionStartTime": "2026-08-01T10:00:00.350Z",
    "sessionId": "sess-42",
    "userId": "u-7",
    "environment": "production",
    "level": "DEFAULT",
    "traceName": "support-bot",
    "tags": ["prod"],
    "release": "v1.2",
    "input": '[{"role": "user", "content": "hi"}]',
    "output": '{"role": "assistant", "content": "hello"}',
    "model": "gpt-4o",
    "modelParameters": {"temperature": 0.2},
    "usageDetails": {"input": 120, "output": 45, "total": 165},
    "costDetails": {"total": 0.0012},
    "metadata": {"customer": "acme", "attempt": 2},
    "promptName": "greeter",
    "promptVersion": 3,
}


def test_ids_hex_passthrough_uuid_and_hash() -> None:
    assert to_trace_id("5B8EFFF798038103D269B633813FC60C") == "5b8efff798038103d269b633813fc60c"
    # A UUID (v3/v4 SDK trace ids) loses its dashes: same 32 hex digits.
    assert to_trace_id("0f8fad5b-d9cb-469f-a165-70867728950e") == "0f8fad5bd9cb469fa16570867728950e"
    hashed = to_trace_id("my-custom-trace")
    assert len(hashed) == 32 and int(hashed, 16) >= 0 and hashed == to_trace_id("my-custom-trace")
    assert to_span_id("A17E00000000BEEF") == "a17e00000000beef"
    legacy = to_span_id("0f8fad5b-d9cb-469f-a165-70867728950e")
    assert len(legacy) == 16 and legacy == to_span_id("0f8fad5b-d9cb-469f-a165-70867728950e")
    assert to_span_id("obs-1") != to_span_id("obs-2")


def test_v2_generation_becomes_the_span_the_otel_sdk_would_send() -> None:
    row = observation_to_span(V2_GENERATION, received_at=NOW)
    assert row["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert row["span_id"] == "a17e00000000beef"
    assert row["parent_span_id"] == "9f1c000000000001"
    assert row["source"] == "langfuse" and row["scope_name"] == "langfuse-sdk"
    assert row["start_time"] == datetime(2026, 8, 1, 10, tzinfo=UTC)
    assert row["status_code"] == "UNSET"
    attrs = json.loads(row["attributes"])
    assert attrs["langfuse.observation.type"] == "generation"
    assert attrs["langfuse.observation.input"] == V2_GENERATION["input"]  # raw string kept as is
    assert attrs["langfuse.observation.model.name"] == "gpt-4o"
    assert json.loads(attrs["langfuse.observation.model.parameters"]) == {"temperature": 0.2}
    assert json.loads(attrs["langfuse.observation.usage_details"]) == {
        "input": 120,
        "output": 45,
        "total": 165,
    }
    assert json.loads(attrs["langfuse.observation.cost_details"]) == {"total": 0.0012}
    # Metadata values are JSON-encoded one key each, as the SDK writes them.
    assert attrs["langfuse.observation.metadata.customer"] == '"acme"'
    assert attrs["langfuse.observation.metadata.attempt"] == "2"
    assert attrs["langfuse.trace.name"] == "support-bot"
    assert attrs["langfuse.trace.tags"] == ["prod"]
    assert attrs["user.id"] == "u-7" and attrs["session.id"] == "sess-42"
    assert attrs["langfuse.environment"] == "production" and attrs["langfuse.release"] == "v1.2"
    assert attrs["langfuse.observation.prompt.name"] == "greeter"
    assert attrs["langfuse.observation.completion_start_time"] == '"2026-08-01T10:00:00.350000+00:00"'
    # The rows validate against the lake's schema.
    assert conform_batch(table_spec("spans"), _batch([row])).num_rows == 1


def test_legacy_export_observation_gives_the_same_attributes_as_v2() -> None:
    legacy = {
        k: v
        for k, v in V2_GENERATION.items()
        if k not in ("sessionId", "userId", "traceName", "tags", "release")
    }
    legacy["input"] = json.loads(V2_GENERATION["input"])  # exports hold parsed JSON values
    legacy["output"] = json.loads(V2_GENERATION["output"])
    legacy["usage"] = {"input": 120, "output": 45, "total": 165, "unit": "TOKENS"}
    del legacy["usageDetails"]
    trace = {
        "id": V2_GENERATION["traceId"],
        "name": "support-bot",
        "tags": ["prod"],
        "userId": "u-7",
        "sessionId": "sess-42",
        "release": "v1.2",
        "environment": "production",
        "observations": [legacy],
    }
    [row] = trace_to_spans(trace, received_at=NOW)
    v2 = observation_to_span(V2_GENERATION, received_at=NOW)
    # Same attributes; io text may differ only in JSON whitespace (parsed values are equal).
    assert _parsed(json.loads(row["attributes"])) == _parsed(json.loads(v2["attributes"]))
    assert {k: v for k, v in row.items() if k != "attributes"} == {
        k: v for k, v in v2.items() if k != "attributes"
    }


def test_uuid_ids_keep_the_originals_and_link_parents() -> None:
    obs = {
        "id": "3c1e2b9a-0000-4000-8000-000000000002",
        "traceId": "0f8fad5b-d9cb-469f-a165-70867728950e",
        "parentObservationId": "3c1e2b9a-0000-4000-8000-000000000001",
        "type": "SPAN",
        "startTime": "2026-08-01T10:00:00Z",
    }
    row = observation_to_span(obs, received_at=NOW)
    attrs = json.loads(row["attributes"])
    assert attrs["langfuse.observation.id"] == obs["id"]
    assert attrs["langfuse.trace.id"] == obs["traceId"]
    assert row["parent_span_id"] == to_span_id("3c1e2b9a-0000-4000-8000-000000000001")
    assert row["name"] == "span"  # no name: the type names it


def test_error_level_marks_the_span_failed() -> None:
    obs = {**V2_GENERATION, "type": "TOOL", "level": "ERROR", "statusMessage": "timeout"}
    row = observation_to_span(obs, received_at=NOW)
    assert row["status_code"] == "ERROR" and row["status_message"] == "timeout"


@pytest.mark.parametrize(
    ("obs", "reason"),
    [
        ({"traceId": "t", "startTime": "2026-08-01T10:00:00Z"}, "missing_field"),  # no id
        ({"id": "o", "startTime": "2026-08-01T10:00:00Z"}, "missing_field"),  # no trace id
        ({"id": "o", "traceId": "t"}, "missing_field"),  # no start time
        ({"id": "o", "traceId": "t", "startTime": "yesterday"}, "bad_timestamp"),
        ({"id": "o", "traceId": "t", "startTime": 1722506400}, "bad_timestamp"),
    ],
)
def test_unusable_observations_name_the_reason(obs: dict, reason: str) -> None:
    with pytest.raises(BadRecord) as info:
        observation_to_span(obs, received_at=NOW)
    assert info.value.reason == reason


def test_trace_without_observations_but_with_io_becomes_one_root_span() -> None:
    trace = {
        "id": "t-legacy",
        "timestamp": "2026-08-01T10:00:00Z",
        "name": "old",
        "input": "q",
        "output": "a",
        "observations": [],
    }
    [row] = trace_to_spans(trace, received_at=NOW)
    attrs = json.loads(row["attributes"])
    assert row["parent_span_id"] is None and attrs["langfuse.observation.input"] == "q"


def test_spans_normalise_as_langfuse_llm_and_tool_calls() -> None:
    gen = observation_to_span(V2_GENERATION, received_at=NOW)
    tool = observation_to_span(
        {
            "id": "b000000000000001",
            "traceId": V2_GENERATION["traceId"],
            "type": "TOOL",
            "name": "get_weather",
            "startTime": "2026-08-01T10:00:02Z",
            "input": '{"city": "Oslo"}',
            "output": "cold",
            "metadata": {"tool_call_id": "call_9"},
        },
        received_at=NOW,
    )
    # As assembly reads them: attributes parsed, times in microseconds (`span_dicts`).
    spans = {s["span_id"]: s for s in span_dicts(pa.Table.from_pylist([gen, tool], SPANS.schema))}
    call = normalize_span(spans[gen["span_id"]])
    assert isinstance(call, LLMCall)
    assert call.model == "gpt-4o" and call.input_tokens == 120 and call.output_tokens == 45
    assert [m["content"] for m in call.input_messages] == ["hi"]
    assert [m["content"] for m in call.output_messages] == ["hello"]
    result = normalize_span(spans[tool["span_id"]])
    assert isinstance(result, ToolCall)
    assert result.name == "get_weather" and result.call_id == "call_9" and result.result == "cold"


def _parsed(attrs: dict) -> dict:
    out = {}
    for key, value in attrs.items():
        try:
            out[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            out[key] = value
    return out


def _batch(rows: list[dict]):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    spec = table_spec("spans")
    fields = [spec.schema.field(n) for n in rows[0]]
    return pa.RecordBatch.from_pylist(rows, schema=pa.schema(fields))
