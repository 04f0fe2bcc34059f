"""No shape of telemetry escapes assembly as an exception: mutations of the real recordings.

Hypothesis takes the spans of real framework recordings (`tests/ingest/frameworks`) and
mutates attribute and event values: strings where objects are expected, objects where
strings are, nulls, wrong types, huge values, truncated JSON, missing ids and parents.
Every trace then either assembles or is a recorded failure with its reason; the batch
itself never raises, and the good traces beside a broken one still assemble.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
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
