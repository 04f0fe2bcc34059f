"""Fuzzing the HTTP endpoints: malformed and mutated bodies never crash the collector.

Every answer must be 200 (the mutation still decoded to a valid request) or a 4xx;
a 4xx must have written nothing; the server must stay healthy; and every row the
collector acknowledged must be in the lake afterwards.
"""

from __future__ import annotations

import gzip
import json

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingest.conftest import sql
from tests.ingest.otlp_cases import as_json, chat_trace

VALID_PB = chat_trace(2).SerializeToString()
VALID_JSON = json.dumps(as_json(chat_trace(1))).encode()
OTLP_KEYS = [
    "resourceSpans",
    "scopeSpans",
    "spans",
    "traceId",
    "spanId",
    "parentSpanId",
    "attributes",
    "key",
    "value",
    "stringValue",
    "intValue",
    "arrayValue",
    "kvlistValue",
    "values",
    "name",
    "kind",
    "startTimeUnixNano",
    "events",
    "status",
    "code",
    "resource",
    "resourceLogs",
    "scopeLogs",
    "logRecords",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "zz", ""]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(OTLP_KEYS), children, max_size=5)
    ),
    max_leaves=30,
)


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[at : at + draw(st.integers(1, 32))]
    return bytes(data)


bodies = st.one_of(
    st.tuples(st.just("application/x-protobuf"), st.binary(max_size=512)),
    st.tuples(st.just("application/x-protobuf"), mutated(VALID_PB)),
    st.tuples(st.just("application/json"), mutated(VALID_JSON)),
    st.tuples(st.just("application/json"), json_values.map(lambda v: json.dumps(v).encode())),
    st.tuples(
        st.just("application/json"),
        st.builds(
            lambda v: json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [v]}]}]}).encode(), json_values
        ),
    ),
    st.tuples(
        st.sampled_from(["text/plain", "", "application/protobuf; x", "application/json; charset=utf-8"]),
        st.binary(max_size=64),
    ),
)


def test_fuzzed_bodies_get_only_200_or_4xx_and_4xx_writes_nothing(collector) -> None:  # type: ignore[no-untyped-def]
    client = httpx.Client(base_url=collector.url, timeout=30)
    stats = collector.runtime.stats
    seen: set[int] = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        body=bodies,
        path=st.sampled_from(["/v1/traces", "/v1/logs", "/api/public/otel/v1/traces"]),
        compress=st.booleans(),
    )
    def check(body: tuple[str, bytes], path: str, compress: bool) -> None:
        content_type, payload = body
        headers = {"Content-Type": content_type}
        if compress:
            payload, headers["Content-Encoding"] = gzip.compress(payload), "gzip"
        before = stats.rows_accepted
        response = client.post(path, content=payload, headers=headers)
        seen.add(response.status_code)
        assert response.status_code == 200 or 400 <= response.status_code < 500, (
            response.status_code,
            response.text,
        )
        if response.status_code != 200:
            assert stats.rows_accepted == before

    check()
    assert client.get("/health").json()["status"] == "ok"
    assert any(400 <= s < 500 for s in seen)
    collector.runtime.flush()
    stored = (
        sql(collector.lake, "SELECT count(*) AS n FROM spans")[0]["n"]
        if collector.lake.has_table("spans")
        else 0
    )
    # Fuzzed spans can repeat ids (the key dedupes them), so the lake holds at most what was accepted.
    assert stored <= stats.rows_accepted
    client.close()
