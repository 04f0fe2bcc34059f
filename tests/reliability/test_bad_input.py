"""Data the collector must refuse, each with a clear reason, and never with a 5xx (issue 13, #4 and #7).

Scores: one bad score is refused naming its field while the good ones of the same
request are stored. Spans: kinds and status codes outside OTLP's enums and times outside
[2000, arrival + a day] are rejected through `partial_success`. Bodies: gzip with
trailing bytes, empty Content-Encoding members and a document of the wrong signal are 4xx.
"""

from __future__ import annotations

import gzip
import json
import time

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.ingest.conftest import sql
from tests.ingest.otlp_cases import as_json, chat_trace

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

TRACE = "ab" * 16
PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def good_score(name: str = "helpful") -> dict:  # type: ignore[type-arg]
    return {"traceId": TRACE, "name": name, "value": 0.5}


def stored_rewards(collector) -> list[str]:  # type: ignore[no-untyped-def]
    if not collector.lake.has_table("rewards"):
        return []
    return [r["name"] for r in sql(collector.lake, "SELECT name FROM rewards ORDER BY name")]


def score_json(extra: str = "", trace: str = f'"{TRACE}"') -> str:
    """A score as raw JSON text: what `json.dumps` cannot make (400 digits, lone surrogates)."""
    return f'{{"traceId": {trace}, "name": "a", "value": 1{extra}}}'


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (score_json(', "value": ' + "1" * 400), "`value`"),  # OverflowError in float()
        (score_json(', "name": "a\\ud800"'), "`name`"),  # a lone surrogate (UnicodeEncodeError)
        (score_json(', "comment": "\\udfff"'), "`comment`"),
        (score_json(trace='["t"]'), "`traceId`"),  # not a string
        ('{"subject": {"kind": "trace", "id": 7}, "name": "a", "value": 1}', "`subject.id`"),
        (score_json(', "id": {"x": 1}'), "`id`"),
        (score_json(', "timestamp": "9999-12-31T00:00:00Z"'), "`timestamp`"),
        (score_json(', "timestamp": "0001-01-01T00:00:00Z"'), "`timestamp`"),
        (score_json(', "timestamp": "1970-01-01T00:00:00Z"'), "`timestamp`"),
    ],
)
def test_a_bad_score_gets_400_naming_the_field_and_writes_nothing(collector, body: str, field: str) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(f"{collector.url}/api/public/scores", content=body, headers=JS)
    assert response.status_code == 400, response.text
    assert field in response.json()["message"]
    assert stored_rewards(collector) == []


def test_json_nested_ten_thousand_deep_is_a_400(collector) -> None:  # type: ignore[no-untyped-def]
    for path in ("/api/public/scores", "/v1/traces", "/v1/logs"):
        response = httpx.post(f"{collector.url}{path}", content="[" * 10_000 + "]" * 10_000, headers=JS)
        assert response.status_code == 400 and "recursion" in response.json()["message"]


def test_one_bad_score_does_not_sink_the_good_ones(collector) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps([good_score("good"), {"traceId": TRACE, "name": "bad\ud800", "value": 1}])
    response = httpx.post(f"{collector.url}/api/public/scores", content=body, headers=JS)
    assert response.status_code == 207
    answer = response.json()
    assert (answer["accepted"], answer["rejected"]) == (1, 1)
    assert (
        answer["errors"][0]["message"].startswith("[1] bad_text")
        and "`name`" in answer["errors"][0]["message"]
    )
    assert stored_rewards(collector) == ["good"]
    # Nothing good in the batch: a 400, which an SDK does not retry.
    only_bad = "[" + score_json(', "value": ' + "1" * 400) + "]"
    assert httpx.post(f"{collector.url}/api/public/scores", content=only_bad, headers=JS).status_code == 400


def test_a_single_score_is_answered_like_langfuse_with_its_id(collector) -> None:  # type: ignore[no-untyped-def]
    given = httpx.post(f"{collector.url}/api/public/scores", json={**good_score(), "id": "score-1"})
    assert given.status_code == 200 and given.json() == {"id": "score-1"}
    fresh = httpx.post(f"{collector.url}/api/public/scores", json=good_score("other"))
    assert fresh.status_code == 200 and len(fresh.json()["id"]) == 36  # a new UUID, as Langfuse makes
    rows = sql(
        collector.lake, "SELECT name, metadata->>'$.langfuse_score_id' AS id FROM rewards ORDER BY name"
    )
    assert rows == [{"name": "helpful", "id": "score-1"}, {"name": "other", "id": fresh.json()["id"]}]


def spans_document(**changes: object) -> dict:  # type: ignore[type-arg]
    """An OTLP/JSON trace of two spans; `changes` are applied to the first (`root`) span."""
    document = as_json(chat_trace(1))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0].update(changes)
    return document


def partial(response: httpx.Response) -> tuple[int, str]:
    assert response.status_code == 200, response.text
    body = response.json().get("partialSuccess", {})
    return int(body.get("rejectedSpans", 0)), body.get("errorMessage", "")


NOW_NS = time.time_ns()


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"kind": 42}, "kind 42 is not a SpanKind"),
        ({"status": {"code": 7}}, "status code 7 is not a StatusCode"),
        ({"startTimeUnixNano": "1", "endTimeUnixNano": "2"}, "before 2000-01-01"),  # 1970
        ({"startTimeUnixNano": "0", "endTimeUnixNano": "0"}, "unset or before"),
        ({"startTimeUnixNano": str(2**64 - 1)}, "after it was received"),  # year 2554
        ({"startTimeUnixNano": str(NOW_NS + 3 * 86_400 * 10**9)}, "after it was received"),
    ],
)
def test_spans_outside_the_protocol_are_rejected_with_partial_success(collector, changes, reason) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(
        f"{collector.url}/v1/traces", content=json.dumps(spans_document(**changes)), headers=JS
    )
    rejected, message = partial(response)
    assert rejected == 1 and reason in message
    collector.runtime.flush()
    rows = sql(collector.lake, "SELECT kind, status_code, dt FROM spans")
    assert len(rows) == 1  # the other span of the request is stored
    assert rows[0]["kind"] == "INTERNAL" and rows[0]["status_code"] in ("UNSET", "OK")
    assert rows[0]["dt"] == time.strftime("%Y-%m-%d", time.gmtime())


def test_a_sender_clock_fifteen_minutes_fast_is_accepted(collector) -> None:  # type: ignore[no-untyped-def]
    ahead = NOW_NS + 15 * 60 * 10**9
    document = spans_document(startTimeUnixNano=str(ahead), endTimeUnixNano=str(ahead + 10**9))
    response = httpx.post(f"{collector.url}/v1/traces", content=json.dumps(document), headers=JS)
    assert partial(response) == (0, "")


def test_log_records_out_of_range_are_rejected_and_undated_ones_are_dated_on_arrival(collector) -> None:  # type: ignore[no-untyped-def]
    records = [
        {"traceId": TRACE, "spanId": "cd" * 8, "eventName": "old", "timeUnixNano": "5"},
        {"traceId": TRACE, "spanId": "cd" * 8, "eventName": "undated"},
    ]
    document = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
    response = httpx.post(f"{collector.url}/v1/logs", content=json.dumps(document), headers=JS)
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    assert "`old`: its time 5 ns is unset or before" in response.json()["partialSuccess"]["errorMessage"]
    collector.runtime.flush()
    assert sql(collector.lake, "SELECT name, dt = current_date AS today FROM spans") == [
        {"name": "undated", "today": True}
    ]


@pytest.mark.parametrize(
    ("body", "headers", "status", "needle"),
    [
        (gzip.compress(b"{}") + b"garbage", {**JS, "Content-Encoding": "gzip"}, 400, "trailing data"),
        (b"{}", {**JS, "Content-Encoding": ", ,"}, 415, "Content-Encoding"),
        (b"{}", {**JS, "Content-Encoding": "gzip,"}, 415, "Content-Encoding"),
        (json.dumps(as_json(chat_trace(1))).encode(), JS, 400, "send it to /v1/traces"),
    ],
)
def test_bodies_the_collector_cannot_trust_are_refused(collector, body, headers, status, needle) -> None:  # type: ignore[no-untyped-def]
    path = "/v1/logs" if needle.endswith("/v1/traces") else "/v1/traces"
    response = httpx.post(f"{collector.url}{path}", content=body, headers=headers)
    assert response.status_code == status and needle in response.json()["message"]
    assert collector.runtime.stats.rows_accepted == 0


def test_concatenated_gzip_members_are_one_body(collector) -> None:  # type: ignore[no-untyped-def]
    # RFC 1952 allows several members back to back (`cat a.gz b.gz`): their contents join.
    raw = chat_trace(1).SerializeToString()
    body = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
    response = httpx.post(
        f"{collector.url}/v1/traces", content=body, headers={**PB, "Content-Encoding": "gzip"}
    )
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    assert collector.runtime.stats.rows_accepted == 2


def test_a_non_string_id_in_otlp_json_names_its_path(collector) -> None:  # type: ignore[no-untyped-def]
    response = httpx.post(
        f"{collector.url}/v1/traces", content=json.dumps(spans_document(traceId=["t"])), headers=JS
    )
    assert response.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId" in response.json()["message"]
