"""Assembly inside the running collector: root span triggers, idle timeout, late spans, events on /v1/logs."""

from __future__ import annotations

import json

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import ingest.assembly.traces as traces
from tests.ingest.conftest import sql, wait_for
from tests.ingest.otlp_cases import chat_trace

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

PB = {"Content-Type": "application/x-protobuf"}


def split(request: ExportTraceServiceRequest, predicate) -> ExportTraceServiceRequest:  # type: ignore[no-untyped-def]
    out = ExportTraceServiceRequest()
    out.CopyFrom(request)
    for resource_spans in out.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            keep = [s for s in scope_spans.spans if predicate(s)]
            del scope_spans.spans[:]
            scope_spans.spans.extend(keep)
    return out


def trajectories(collector) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    if not collector.lake.has_table("trajectories"):
        return []
    return sql(
        collector.lake, "SELECT trajectory_id, status, len(messages) AS n, final_output FROM trajectories"
    )


def test_late_span_reassembles_the_trace_and_the_newer_row_wins(collector) -> None:  # type: ignore[no-untyped-def]
    request = chat_trace(3)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    late = max((s for s in spans if s.parent_span_id), key=lambda s: s.start_time_unix_nano)
    early = split(request, lambda s: s.span_id != late.span_id)
    assert (
        httpx.post(f"{collector.url}/v1/traces", content=early.SerializeToString(), headers=PB).status_code
        == 200
    )
    first = wait_for(lambda: trajectories(collector))
    assert first[0]["final_output"] == "answer 1" and first[0]["status"] == "ok"
    only_late = split(request, lambda s: s.span_id == late.span_id)
    assert (
        httpx.post(
            f"{collector.url}/v1/traces", content=only_late.SerializeToString(), headers=PB
        ).status_code
        == 200
    )
    updated = wait_for(lambda: [t for t in trajectories(collector) if t["final_output"] == "answer 2"])
    assert len(trajectories(collector)) == 1 and updated[0]["n"] == 6


def test_trace_without_root_is_assembled_after_the_idle_timeout(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(idle_timeout_s=0.5)
    request = chat_trace(1)
    children = split(request, lambda s: bool(s.parent_span_id))
    httpx.post(f"{collector.url}/v1/traces", content=children.SerializeToString(), headers=PB)
    rows = wait_for(lambda: trajectories(collector), timeout=20)
    assert rows[0]["status"] == "truncated" and rows[0]["final_output"] == "answer 0"


def test_deprecated_events_on_v1_logs_as_otlp_json_fill_in_the_content(collector) -> None:  # type: ignore[no-untyped-def]
    trace_id, root_id, chat_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "aaa19b7ec3c1b174"
    t = 1_795_000_000_000_000_000
    spans = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "legacy"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "legacy-instr"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": root_id,
                                "name": "agent",
                                "kind": 1,
                                "startTimeUnixNano": str(t),
                                "endTimeUnixNano": str(t + 9_000_000),
                            },
                            {
                                "traceId": trace_id,
                                "spanId": chat_id,
                                "parentSpanId": root_id,
                                "name": "chat gpt-4",
                                "kind": 3,
                                "startTimeUnixNano": str(t + 1),
                                "endTimeUnixNano": str(t + 5_000_000),
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.system", "value": {"stringValue": "openai"}},
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4"}},
                                    {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "12"}},
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }

    def record(name: str, body: dict, dt: int) -> dict:  # type: ignore[type-arg]
        def any_value(v):  # type: ignore[no-untyped-def]
            if isinstance(v, dict):
                return {"kvlistValue": {"values": [{"key": k, "value": any_value(x)} for k, x in v.items()]}}
            return {"stringValue": v}

        return {
            "timeUnixNano": str(t + dt),
            "eventName": name,
            "traceId": trace_id,
            "spanId": chat_id,
            "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
            "body": any_value(body),
        }

    logs = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            record("gen_ai.system.message", {"content": "be nice"}, 2),
                            record("gen_ai.user.message", {"content": "hello?"}, 3),
                            record(
                                "gen_ai.choice",
                                {
                                    "index": "0",
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": "hi!"},
                                },
                                4,
                            ),
                            record("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "politeness"}, 6),
                        ]
                    }
                ]
            }
        ]
    }
    headers = {"Content-Type": "application/json"}
    assert (
        httpx.post(f"{collector.url}/v1/logs", content=json.dumps(logs), headers=headers).status_code == 200
    )
    assert (
        httpx.post(f"{collector.url}/v1/traces", content=json.dumps(spans), headers=headers).status_code
        == 200
    )
    rows = wait_for(lambda: [r for r in trajectories(collector) if r["final_output"] == "hi!"])
    assert rows[0]["trajectory_id"] == trace_id and rows[0]["n"] == 3
    messages = sql(collector.lake, "SELECT role, content FROM messages ORDER BY position")
    assert messages == [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "hello?"},
        {"role": "assistant", "content": "hi!"},
    ]
    reward = wait_for(
        lambda: (
            collector.lake.has_table("rewards")
            and sql(collector.lake, "SELECT name, trajectory_id FROM rewards")
        )
    )
    assert reward == [{"name": "politeness", "trajectory_id": trace_id}]


def test_log_records_without_trace_context_are_reported_as_rejected(collector) -> None:  # type: ignore[no-untyped-def]
    logs = {
        "resourceLogs": [
            {"scopeLogs": [{"logRecords": [{"eventName": "app.started", "body": {"stringValue": "x"}}]}]}
        ]
    }
    response = httpx.post(
        f"{collector.url}/v1/logs", content=json.dumps(logs), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    assert "no trace context" in response.json()["partialSuccess"]["errorMessage"]


def test_a_trace_that_breaks_assembly_leaves_the_collector_healthy_and_the_rest_assembled(
    collector, monkeypatch
) -> None:  # type: ignore[no-untyped-def]

    real = traces.normalize_span

    def fragile(span, memo=None):  # type: ignore[no-untyped-def]
        if span["attributes"].get("test.poison"):
            raise ValueError("dictionary update sequence element #0 has length 1; 2 is required")
        return real(span, memo)

    monkeypatch.setattr(traces, "normalize_span", fragile)
    request = chat_trace(1, content="good")
    poisoned = chat_trace(1, content="bad")
    for span in (s for rs in poisoned.resource_spans for ss in rs.scope_spans for s in ss.spans):
        attribute = span.attributes.add()
        attribute.key, attribute.value.bool_value = "test.poison", True
    request.resource_spans.extend(poisoned.resource_spans)
    request.resource_spans.extend(chat_trace(2, content="also good").resource_spans)
    response = httpx.post(f"{collector.url}/v1/traces", content=request.SerializeToString(), headers=PB)
    assert response.status_code == 200
    rows = wait_for(lambda: len(trajectories(collector)) == 2 and trajectories(collector))
    assert sorted(r["final_output"] for r in rows) == ["answer 0", "answer 1"]
    failures = wait_for(
        lambda: (
            collector.lake.has_table("ingest_errors") and sql(collector.lake, "SELECT * FROM ingest_errors")
        )
    )
    bad_trace = poisoned.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert [(f["trace_id"], f["status"], f["error_class"]) for f in failures] == [
        (bad_trace, "failed", "ValueError")
    ]
    health = httpx.get(f"{collector.url}/health").json()
    assert health["status"] == "ok" and health["traces_failed"] == 1
    # The collector goes on: the next trace assembles.
    later = chat_trace(1, content="later")
    assert (
        httpx.post(f"{collector.url}/v1/traces", content=later.SerializeToString(), headers=PB).status_code
        == 200
    )
    wait_for(lambda: len(trajectories(collector)) == 3)


def test_metrics_are_acknowledged_in_both_encodings_and_counted(collector) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )

    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "gen_ai.client.token.usage"
    for value in (40, 12):
        metric.histogram.data_points.add().sum = value
    answer = httpx.post(f"{collector.url}/v1/metrics", content=request.SerializeToString(), headers=PB)
    assert answer.status_code == 200
    ExportMetricsServiceResponse.FromString(answer.content)
    document = {
        "resourceMetrics": [
            {"scopeMetrics": [{"metrics": [{"name": "m", "sum": {"dataPoints": [{"asInt": "3"}]}}]}]}
        ]
    }
    assert httpx.post(f"{collector.url}/v1/metrics", json=document).json() == {}
    assert httpx.post(f"{collector.url}/v1/metrics", content=b"\xff\x00junk", headers=PB).status_code == 400
    assert httpx.get(f"{collector.url}/health").json()["metric_points"] == 3
