"""The collector's HTTP contract: content types, encodings, ids, limits, auth, back-pressure, retries."""

from __future__ import annotations

import gzip
import json
import zlib

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ingest.errors import CollectorSettingError
from ingest.otlp.config import CollectorConfig
from tests.ingest.conftest import sql, wait_for
from tests.ingest.otlp_cases import as_json, chat_trace, trace_ids

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def span_count(collector) -> int:  # type: ignore[no-untyped-def]
    collector.runtime.flush()
    if not collector.lake.has_table("spans"):
        return 0
    return sql(collector.lake, "SELECT count(*) AS n FROM spans")[0]["n"]


def test_protobuf_gzip_and_json_hex_ids_land_with_the_right_ids(collector) -> None:  # type: ignore[no-untyped-def]
    first, second = chat_trace(2), chat_trace(1)
    r1 = httpx.post(
        f"{collector.url}/v1/traces",
        content=gzip.compress(first.SerializeToString()),
        headers={**PB, "Content-Encoding": "gzip"},
    )
    assert r1.status_code == 200 and r1.headers["content-type"].startswith("application/x-protobuf")
    response = ExportTraceServiceResponse()
    response.ParseFromString(r1.content)
    assert not response.HasField("partial_success")
    r2 = httpx.post(f"{collector.url}/v1/traces", content=json.dumps(as_json(second)), headers=JS)
    assert r2.status_code == 200 and r2.headers["content-type"].startswith("application/json")
    assert span_count(collector) == 5
    stored = {r["trace_id"] for r in sql(collector.lake, "SELECT DISTINCT trace_id FROM spans")}
    # Hex ids in OTLP/JSON must not be misread as base64 (the ParseDict trap).
    assert stored == trace_ids(first) | trace_ids(second)
    assert all(len(t) == 32 for t in stored)


def test_retried_delivery_does_not_duplicate_rows(collector) -> None:  # type: ignore[no-untyped-def]
    body = chat_trace(3).SerializeToString()
    for _ in range(3):
        assert httpx.post(f"{collector.url}/v1/traces", content=body, headers=PB).status_code == 200
    assert span_count(collector) == 4
    wait_for(lambda: sql(collector.lake, "SELECT count(*) AS n FROM trajectories")[0]["n"] == 1)


def test_partial_success_names_the_rejected_spans(collector) -> None:  # type: ignore[no-untyped-def]
    request = chat_trace(1)
    bad = request.resource_spans[0].scope_spans[0].spans[0]
    bad.span_id = b"\x01\x02"  # wrong length
    response = httpx.post(f"{collector.url}/v1/traces", content=json.dumps(as_json(request)), headers=JS)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "invalid ids" in partial["errorMessage"]
    assert span_count(collector) == 1


@pytest.mark.parametrize(
    ("body", "headers", "status", "needle"),
    [
        (b"\x0a\xff\xff", PB, 400, "protobuf"),
        (b"{not json", JS, 400, "JSON"),
        (
            json.dumps(
                {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}]}
            ).encode(),
            JS,
            400,
            "not hex",
        ),
        (b"[1, 2]", JS, 400, "expected an object"),
        (b"\x1f\x8b\x08garbage", {**PB, "Content-Encoding": "gzip"}, 400, "gzip"),
        (b"hello", {"Content-Type": "text/plain"}, 415, "text/plain"),
        (b"hello", {**PB, "Content-Encoding": "br"}, 415, "br"),
    ],
)
def test_bad_requests_get_a_4xx_naming_the_problem_and_write_nothing(
    collector, body, headers, status, needle
) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(f"{collector.url}/v1/traces", content=body, headers=headers)
    assert response.status_code == status
    if response.headers["content-type"].startswith("application/x-protobuf"):
        message = status_pb2.Status.FromString(response.content).message
    else:
        message = response.json()["message"]
    assert needle in message
    assert span_count(collector) == 0


def test_body_limits_apply_before_and_after_decompression(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(max_body_mb=1 / 16)
    big = httpx.post(f"{collector.url}/v1/traces", content=b"\0" * (65 * 1024), headers=PB)
    assert big.status_code == 413
    # A gzip bomb: 30 KiB on the wire, 50 MiB inflated; must be refused without inflating it all.
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    payload = bomb.compress(b"\0" * (50 * 1024 * 1024)) + bomb.flush()
    assert len(payload) < 64 * 1024
    response = httpx.post(
        f"{collector.url}/v1/traces", content=payload, headers={**PB, "Content-Encoding": "gzip"}
    )
    assert (
        response.status_code == 413
        and "decompressed" in status_pb2.Status.FromString(response.content).message
    )
    assert httpx.get(f"{collector.url}/health").json()["status"] == "ok"
    assert span_count(collector) == 0


def test_bearer_token_is_required_when_configured(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(bearer_token="s3cret-token")
    body = chat_trace(1).SerializeToString()
    assert httpx.post(f"{collector.url}/v1/traces", content=body, headers=PB).status_code == 401
    wrong = httpx.post(
        f"{collector.url}/v1/traces", content=body, headers={**PB, "Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
    ok = httpx.post(
        f"{collector.url}/v1/traces", content=body, headers={**PB, "Authorization": "Bearer s3cret-token"}
    )
    assert ok.status_code == 200
    assert span_count(collector) == 2


def test_overload_answers_503_with_retry_after(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(max_pending_mb=1e-6, flush_seconds=3600, retry_after_s=7)
    body = chat_trace(1).SerializeToString()
    assert httpx.post(f"{collector.url}/v1/traces", content=body, headers=PB).status_code == 200
    busy = httpx.post(f"{collector.url}/v1/traces", content=body, headers=PB)
    assert busy.status_code == 503 and busy.headers["retry-after"] == "7"


def test_scores_endpoint_accepts_batches_and_reports_rejects(collector) -> None:  # type: ignore[no-untyped-def]
    scores = [
        {
            "id": "s1",
            "traceId": "ab" * 16,
            "name": "helpful",
            "value": 0.5,
            "comment": "mail me at a@b.io, key sk-abcdefghijklmnopqrstu",
        },
        {"id": "s2", "sessionId": "sess", "name": "session-level", "value": 1},
    ]
    response = httpx.post(f"{collector.url}/api/public/scores", json=scores)
    assert response.status_code == 207
    assert response.json()["accepted"] == 1 and "names no trace" in response.json()["errors"][0]["message"]
    rows = sql(collector.lake, "SELECT trajectory_id, name, value, explanation FROM rewards")
    assert rows == [
        {
            "trajectory_id": "ab" * 16,
            "name": "helpful",
            "value": 0.5,
            "explanation": "mail me at a@b.io, key [REDACTED:api_key]",
        }
    ]


def test_a_correction_pushed_as_a_score_is_the_conversations_label(collector) -> None:  # type: ignore[no-untyped-def]
    """A Langfuse `CORRECTION` score sent to the collector (as the Langfuse SDK's `score()` sends
    it) is the right answer of its trace's conversation, as a pulled one is; a retry rewrites it."""
    trace = chat_trace(1)
    httpx.post(f"{collector.url}/v1/traces", content=trace.SerializeToString(), headers=PB)
    [trace_id] = trace_ids(trace)
    correction = {
        "id": "fix-1",
        "traceId": trace_id,
        "name": "correction",
        "dataType": "CORRECTION",
        "value": "It is 14C in Paris.",
        "comment": "the tool said 14C",
    }
    verdict = {"id": "ok-1", "traceId": trace_id, "name": "helpful", "value": 1}
    for _ in range(2):  # a retried request
        response = httpx.post(f"{collector.url}/api/public/scores", json=[correction, verdict])
        assert response.status_code == 202, response.text
    [label] = sql(
        collector.lake, "SELECT trajectory_id, trace_id, name, expected, source, comment FROM labels"
    )
    assert label == {
        "trajectory_id": trace_id,
        "trace_id": trace_id,
        "name": "expected",
        "expected": json.dumps({"final_output": "It is 14C in Paris."}),
        "source": "feedback",
        "comment": "the tool said 14C",
    }
    names = sql(collector.lake, "SELECT name FROM rewards ORDER BY name")
    assert [r["name"] for r in names] == ["correction", "helpful"]  # every score stays a reward too


def test_health_reports_counters(collector) -> None:  # type: ignore[no-untyped-def]
    httpx.post(f"{collector.url}/v1/traces", content=chat_trace(1).SerializeToString(), headers=PB)
    health = httpx.get(f"{collector.url}/health").json()
    assert health["status"] == "ok" and health["rows_accepted"] == 2 and health["requests"] == 1


def test_config_rejects_half_a_langfuse_key_pair_and_non_positive_limits() -> None:
    with pytest.raises(CollectorSettingError, match="both Langfuse keys") as info:
        CollectorConfig(langfuse_public_key="pk-lf-1")
    assert info.value.field == "langfuse_public_key"
    with pytest.raises(CollectorSettingError, match="must be positive"):
        CollectorConfig(max_body_mb=0)
