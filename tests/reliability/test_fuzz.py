"""Fuzzing the HTTP endpoints: malformed and mutated bodies never crash the collector.

Every answer must be 200 (the mutation still decoded to a valid request) or a 4xx;
a 4xx must have written nothing; the server must stay healthy; and every row the
collector acknowledged must be in the lake afterwards. Two fuzzers: hypothesis over
OTLP bodies, and a plain seeded generator of 10,000 bodies spread over every POST
endpoint (scores included), after which every stored row is checked for what the
collector promises: hex ids, enum values, days in range, valid JSON, finite rewards.
"""

from __future__ import annotations

import gzip
import json
import random
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.otlp.app import create_app
from ingest.otlp.convert import KINDS, STATUS
from store.schema import LOG_KIND
from tests.ingest.conftest import sql
from tests.ingest.otlp_cases import as_json, chat_trace

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

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


# --- 10,000 seeded bodies across every POST endpoint (issue 13) --------------------------------------

WEIRD_STRINGS = ["", "x", "\ud800", "\udfff\ud800", "\x00", "é" * 50, "sk-" + "a" * 30, "0" * 32, "zz", " "]
WEIRD_NUMBERS = [0, -1, 1, 2**63, 2**64 - 1, 2**64, -(2**63), 10**400, 1e308, -1e308, 0.5, 1e-320]
WEIRD_TIMES = [
    "1970-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2026-02-30",
    "now",
    "",
]


class BodyGenerator:
    """Seeded request bodies: mutations of valid requests and documents built from odd values
    in the places each endpoint reads, so that decoding, conversion and validation all get hit."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.valid_pb = [chat_trace(n).SerializeToString() for n in (1, 2, 3)]
        self.valid_json = [json.dumps(as_json(chat_trace(n))).encode() for n in (1, 2)]

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        pick = rng.random()
        if depth > 3 or pick < 0.3:
            return rng.choice([None, True, False, *WEIRD_NUMBERS, *WEIRD_STRINGS])
        if pick < 0.45:
            return [self.value(depth + 1) for _ in range(rng.randint(0, 3))]
        if pick < 0.6:
            return {rng.choice(OTLP_KEYS): self.value(depth + 1) for _ in range(rng.randint(0, 3))}
        return rng.choice(WEIRD_STRINGS + [str(n) for n in WEIRD_NUMBERS[:6]])

    def span(self) -> dict[str, Any]:
        rng = self.rng
        span: dict[str, Any] = {
            "traceId": rng.choice(["0af7651916cd43dd8448eb211c80319c", "00" * 16, "ab" * 16, self.value()]),
            "spanId": rng.choice(["b7ad6b7169203331", "00" * 8, "cd" * 8, self.value()]),
            "name": rng.choice([*WEIRD_STRINGS, self.value()]),
            "kind": rng.choice([0, 1, 2, 5, 6, 42, -1, "SPAN_KIND_SERVER", self.value()]),
            "startTimeUnixNano": rng.choice([str(time.time_ns()), *map(str, WEIRD_NUMBERS), self.value()]),
            "endTimeUnixNano": rng.choice([str(time.time_ns()), "0", self.value()]),
            "status": rng.choice([{"code": rng.choice([0, 1, 2, 3, 7, -5])}, self.value()]),
            "attributes": [
                {"key": rng.choice(WEIRD_STRINGS), "value": {"stringValue": rng.choice(WEIRD_STRINGS)}}
            ],
        }
        for key in rng.sample(list(span), rng.randint(0, 3)):
            del span[key]
        return span

    def score(self) -> Any:
        rng = self.rng
        score: dict[str, Any] = {
            "traceId": rng.choice(["ab" * 16, "some-trace", self.value()]),
            "name": rng.choice(["helpful", *WEIRD_STRINGS, self.value()]),
            "value": rng.choice([0.5, True, "pass", "meh", *WEIRD_NUMBERS, self.value()]),
            "dataType": rng.choice(
                [None, "NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT", "BOGUS", self.value()]
            ),
            "timestamp": rng.choice([None, *WEIRD_TIMES, self.value()]),
            "comment": rng.choice([None, *WEIRD_STRINGS, self.value()]),
            "metadata": self.value(),
            "id": rng.choice([None, "s1", self.value()]),
        }
        for key in rng.sample(list(score), rng.randint(0, 4)):
            del score[key]
        return score if rng.random() < 0.7 else self.value()

    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if not out:
                break
            at = rng.randrange(len(out))
            op = rng.random()
            if op < 0.4:
                out[at] ^= 1 << rng.randrange(8)
            elif op < 0.6:
                del out[at:]
            elif op < 0.8:
                out[at:at] = rng.randbytes(rng.randint(1, 16))
            else:
                del out[at : at + rng.randint(1, 32)]
        return bytes(out)

    def request(self, path: str) -> tuple[bytes, dict[str, str]]:
        rng = self.rng
        protobuf = {"Content-Type": "application/x-protobuf"}
        json_type = {"Content-Type": "application/json"}
        kind = rng.random()
        if path.endswith("scores"):
            if kind < 0.8:
                document = (
                    self.score() if rng.random() < 0.5 else [self.score() for _ in range(rng.randint(0, 4))]
                )
                body, headers = json.dumps(document).encode(), json_type
            else:
                body, headers = self.mutate(json.dumps([self.score()]).encode()), json_type
        elif kind < 0.2:
            body, headers = rng.randbytes(rng.randint(0, 300)), protobuf
        elif kind < 0.45:
            body, headers = self.mutate(rng.choice(self.valid_pb)), protobuf
        elif kind < 0.55:
            body, headers = self.mutate(rng.choice(self.valid_json)), json_type
        elif kind < 0.75:  # a valid request with one field of one span made odd
            document = json.loads(rng.choice(self.valid_json))
            spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
            key, value = rng.choice(list(self.span().items()) or [("name", "x")])
            rng.choice(spans)[key] = value
            body, headers = json.dumps(document).encode(), json_type
        else:
            spans = [self.span() for _ in range(rng.randint(1, 4))]
            if "logs" in path and rng.random() < 0.7:
                document: Any = {"resourceLogs": [{"scopeLogs": [{"logRecords": spans}]}]}
            elif "metrics" in path and rng.random() < 0.7:
                point = {"asInt": str(rng.randint(0, 10**6)), "timeUnixNano": str(time.time_ns())}
                metric = {"name": "gen_ai.client.token.usage", "sum": {"dataPoints": [point]}}
                document = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [metric]}]}]}
            else:
                document = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
            body, headers = json.dumps(document).encode(), json_type
        roll = rng.random()
        if roll < 0.1:
            body, headers = gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
        elif roll < 0.13:
            body, headers = gzip.compress(body) + rng.randbytes(4), {**headers, "Content-Encoding": "gzip"}
        elif roll < 0.15:
            headers = {**headers, "Content-Encoding": rng.choice([", ,", "br", "gzip, identity", "identity"])}
        elif roll < 0.17:
            headers = {"Content-Type": rng.choice(["text/plain", "", "application/json; charset=latin-1"])}
        return body, headers


def post_paths(app: Any) -> list[str]:
    """Every POST route of the collector app (new endpoints join the fuzzing by themselves)."""
    return sorted(r.path for r in app.routes if "POST" in (getattr(r, "methods", None) or ()))


def test_ten_thousand_seeded_bodies_on_every_post_endpoint_get_no_5xx_and_write_nothing_malformed(
    start_collector,  # type: ignore[no-untyped-def]
) -> None:
    collector = start_collector(idle_timeout_s=0.5)
    paths = post_paths(create_app(collector.config))
    assert {"/v1/traces", "/v1/logs", "/api/public/otel/v1/traces", "/api/public/scores"} <= set(paths)
    generator = BodyGenerator(seed=13)
    stats = collector.runtime.stats
    answers: dict[int, int] = {}
    with httpx.Client(base_url=collector.url, timeout=30) as client:
        for n in range(10_000):
            path = paths[n % len(paths)]
            body, headers = generator.request(path)
            before = stats.rows_accepted
            response = client.post(path, content=body, headers=headers)
            answers[response.status_code] = answers.get(response.status_code, 0) + 1
            assert response.status_code < 500, (path, headers, body[:200], response.text)
            if response.status_code >= 400 and not path.endswith("scores"):
                assert stats.rows_accepted == before, (path, response.status_code)
        health = client.get("/health").json()
    assert health["status"] == "ok"
    # Both sides were exercised: many bodies got through to the lake, most were refused.
    accepted = sum(v for k, v in answers.items() if 200 <= k < 300)
    assert accepted > 1000 and sum(v for k, v in answers.items() if 400 <= k < 500) > 5000, answers
    collector.runtime.flush()
    collector.runtime.assemble_ready(everything=True)
    # Nothing the lake's writer refused (it would be a `.failed` segment and `last_error`).
    assert collector.runtime.last_error is None
    lake = collector.lake
    spans = sql(
        lake,
        "SELECT count(*) AS n, count(*) FILTER (WHERE NOT regexp_full_match(trace_id, '[0-9a-f]{32}') "
        "OR NOT regexp_full_match(span_id, '[0-9a-f]{16}')) AS bad_ids, "
        f"count(*) FILTER (WHERE kind NOT IN {(*KINDS, LOG_KIND)} OR status_code NOT IN {STATUS}) AS bad_enums, "
        "count(*) FILTER (WHERE dt < DATE '2000-01-01' OR dt > current_date + 1) AS bad_days, "
        "count(*) FILTER (WHERE NOT json_valid(attributes) OR NOT json_valid(events) "
        "OR NOT json_valid(resource)) AS bad_json FROM spans",
    )[0]
    assert (
        spans["n"] > 0
        and spans["bad_ids"] == spans["bad_enums"] == spans["bad_days"] == spans["bad_json"] == 0
    )
    if lake.has_table("rewards"):
        rewards = sql(
            lake,
            "SELECT count(*) AS n, count(*) FILTER (WHERE NOT isfinite(value)) AS bad_values, "
            "count(*) FILTER (WHERE dt < DATE '2000-01-01' OR dt > current_date + 1) AS bad_days, "
            "count(*) FILTER (WHERE NOT json_valid(metadata)) AS bad_json FROM rewards",
        )[0]
        assert rewards["bad_values"] == rewards["bad_days"] == rewards["bad_json"] == 0, rewards
        # Every row reads back into Python (no datetime out of range, no invalid text).
        assert len(sql(lake, "SELECT * FROM rewards")) == rewards["n"]
