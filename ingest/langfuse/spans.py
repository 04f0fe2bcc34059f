"""Langfuse observations -> rows of the lake's `spans` table.

A Langfuse observation and a span sent by the Langfuse OTel SDK describe the same thing,
so each observation becomes the span that SDK would have exported: the attribute names
are the SDK's own (`langfuse/_client/attributes.py` in langfuse 5.0.4), values are
serialised the way it serialises them (strings kept, other values JSON-encoded, each
metadata value JSON-encoded under `langfuse.observation.metadata.<key>`), and
`scope_name` is the SDK's tracer name, `langfuse-sdk`. The collector's Langfuse
normaliser and the assembler then treat pulled, imported and OTel-received traces alike.

Ids: a span needs a 32-hex trace id and a 16-hex span id. Langfuse ids from the OTel
SDK already are; UUIDs (older SDKs) lose their dashes; anything else is hashed to a
stable hex id. The original ids are always kept in `langfuse.trace.id` and
`langfuse.observation.id`, and scores are mapped with the same functions.

Two input shapes are accepted, both as camelCase dicts: v2 observations
(`GET /api/public/v2/observations`, trace fields denormalised onto every observation,
input/output as raw strings) and the observations nested in a `TraceWithFullDetails`
export of older SDKs (input/output as JSON values, trace fields on the trace).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import orjson

from ingest.records import BadRecord, check_time, maybe_time, parse_time, to_span_id, to_trace_id

SOURCE = "langfuse"
SCOPE_NAME = "langfuse-sdk"


OBSERVATION_TYPES = (
    "span",
    "generation",
    "event",
    "agent",
    "tool",
    "chain",
    "retriever",
    "evaluator",
    "guardrail",
    "embedding",
)


# --- values --------------------------------------------------------------------------------


class ObservationError(BadRecord):
    """One observation cannot become a span; `reason` is a snake_case code."""


def serialize_value(value: Any) -> str | None:
    """As the Langfuse SDK's `_serialize`: strings unchanged, None stays None, else JSON.

    (orjson writes compact JSON where the SDK's `json.dumps` puts spaces; readers parse
    the text, so only the bytes differ, and the import is several times faster.)
    """
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def serialize_metadata_value(value: Any) -> str:
    """As the SDK's `_serialize_metadata_value`: every value JSON-encoded, strings included."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _flatten_metadata(metadata: Any, prefix: str, into: dict[str, Any]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        into[prefix] = serialize_metadata_value(metadata)
        return
    for key, value in metadata.items():
        into[f"{prefix}.{key}"] = serialize_metadata_value(value)


def _usage_details(obs: Mapping[str, Any]) -> dict[str, Any] | None:
    details = obs.get("usageDetails")
    if details:
        return dict(details)
    usage = obs.get("usage")  # v3/v4 `Usage`: {input, output, total, unit, ...}
    if isinstance(usage, Mapping):
        picked = {k: usage[k] for k in ("input", "output", "total") if usage.get(k) is not None}
        if picked:
            return picked
    legacy = {
        "input": obs.get("promptTokens"),
        "output": obs.get("completionTokens"),
        "total": obs.get("totalTokens"),
    }
    legacy = {k: v for k, v in legacy.items() if v}
    return legacy or None


# --- the conversion --------------------------------------------------------------------------


def observation_to_span(
    obs: Mapping[str, Any],
    *,
    trace: Mapping[str, Any] | None = None,
    received_at: datetime,
) -> dict[str, Any]:
    """One Langfuse observation as a `spans` row (a dict with the table's column names).

    `trace` is the enclosing `TraceWithFullDetails` for nested export observations; v2
    observations carry their trace context themselves. Raises `ObservationError` when
    the observation lacks an id, a trace id or a valid start time.
    """
    obs_id = obs.get("id")
    if not isinstance(obs_id, str) or not obs_id:
        raise ObservationError("missing_field", f"observation has no `id` (keys: {', '.join(sorted(obs))})")
    raw_trace_id = obs.get("traceId") or (trace or {}).get("id")
    if not isinstance(raw_trace_id, str) or not raw_trace_id:
        raise ObservationError("missing_field", f"observation `{obs_id}` has no `traceId`")
    if "startTime" not in obs:
        raise ObservationError("missing_field", f"observation `{obs_id}` has no `startTime`")
    start = check_time(
        parse_time(obs["startTime"], f"{obs_id}.startTime"), f"{obs_id}.startTime", received_at
    )
    end = maybe_time(obs.get("endTime"), f"{obs_id}.endTime")
    if end is not None:
        check_time(end, f"{obs_id}.endTime", received_at)
    kind = str(obs.get("type") or "SPAN").lower()

    ctx = trace or {}
    attrs: dict[str, Any] = {
        "langfuse.observation.id": obs_id,
        "langfuse.trace.id": raw_trace_id,
        "langfuse.observation.type": kind,
    }
    level = obs.get("level")
    if level:
        attrs["langfuse.observation.level"] = str(level)
    _put(attrs, "langfuse.observation.status_message", obs.get("statusMessage"))
    _put(attrs, "langfuse.version", obs.get("version") or ctx.get("version"))
    _put(attrs, "langfuse.observation.input", serialize_value(obs.get("input")))
    _put(attrs, "langfuse.observation.output", serialize_value(obs.get("output")))
    _put(attrs, "langfuse.observation.model.name", obs.get("model") or obs.get("providedModelName"))
    _put(attrs, "langfuse.observation.model.parameters", serialize_value(obs.get("modelParameters") or None))
    _put(attrs, "langfuse.observation.usage_details", serialize_value(_usage_details(obs)))
    _put(attrs, "langfuse.observation.cost_details", serialize_value(obs.get("costDetails") or None))
    completion_start = maybe_time(obs.get("completionStartTime"), f"{obs_id}.completionStartTime")
    if completion_start is not None:
        # The SDK JSON-encodes the datetime, so the attribute is a quoted ISO string.
        attrs["langfuse.observation.completion_start_time"] = json.dumps(completion_start.isoformat())
    _put(attrs, "langfuse.observation.prompt.name", obs.get("promptName"))
    _put(attrs, "langfuse.observation.prompt.version", obs.get("promptVersion"))
    metadata = obs.get("metadata") or None
    _flatten_metadata(metadata, "langfuse.observation.metadata", attrs)

    # Trace context: denormalised on v2 observations, on the trace in exports.
    _put(attrs, "langfuse.trace.name", obs.get("traceName") or ctx.get("name"))
    tags = obs.get("tags") if obs.get("tags") is not None else ctx.get("tags")
    if tags:
        attrs["langfuse.trace.tags"] = [str(t) for t in tags]
    _put(attrs, "user.id", obs.get("userId") or ctx.get("userId"))
    _put(attrs, "session.id", obs.get("sessionId") or ctx.get("sessionId"))
    _put(attrs, "langfuse.environment", obs.get("environment") or ctx.get("environment"))
    _put(attrs, "langfuse.release", obs.get("release") or ctx.get("release"))
    if ctx.get("metadata"):
        _flatten_metadata(ctx["metadata"], "langfuse.trace.metadata", attrs)

    parent = obs.get("parentObservationId")
    return {
        "trace_id": to_trace_id(raw_trace_id),
        "span_id": to_span_id(obs_id),
        "source": SOURCE,
        "name": obs.get("name") or kind,
        "kind": "INTERNAL",
        "parent_span_id": to_span_id(parent) if isinstance(parent, str) and parent else None,
        "start_time": start,
        "end_time": end,
        "status_code": "ERROR" if str(level or "").upper() == "ERROR" else "UNSET",
        "status_message": obs.get("statusMessage"),
        "service_name": None,
        "scope_name": SCOPE_NAME,
        "attributes": orjson.dumps(attrs, default=str).decode(),
        "events": "[]",
        "resource": "{}",
        "received_at": received_at,
    }


def trace_to_spans(trace: Mapping[str, Any], *, received_at: datetime) -> Iterator[dict[str, Any]]:
    """The spans of one `TraceWithFullDetails` export record (its nested observations).

    A legacy trace logged with trace-level input/output but no observations becomes one
    root span carrying them, so it still yields a trajectory.
    """
    trace_id = trace.get("id")
    if not isinstance(trace_id, str) or not trace_id:
        raise ObservationError("missing_field", f"trace has no `id` (keys: {', '.join(sorted(trace))})")
    observations = trace.get("observations")
    if observations is None:
        observations = []
    if not isinstance(observations, list):
        raise ObservationError("bad_field", f"trace `{trace_id}`: `observations` is not a list")
    if not observations and (trace.get("input") is not None or trace.get("output") is not None):
        if "timestamp" not in trace:
            raise ObservationError("missing_field", f"trace `{trace_id}` has no `timestamp`")
        observations = [
            {
                "id": f"{trace_id}-root",
                "traceId": trace_id,
                "type": "SPAN",
                "name": trace.get("name"),
                "startTime": trace["timestamp"],
                "input": trace.get("input"),
                "output": trace.get("output"),
            }
        ]
    for obs in observations:
        if not isinstance(obs, Mapping):
            raise ObservationError("bad_field", f"trace `{trace_id}` has a non-object observation")
        yield observation_to_span(obs, trace=trace, received_at=received_at)


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != "":
        attrs[key] = value
