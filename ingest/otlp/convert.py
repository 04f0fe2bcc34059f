"""Convert decoded OTLP requests into `spans` rows, column by column.

This is the hot path of the collector and of the in-process exporter, so it is shaped
for throughput: one pass over the protobuf spans appends to plain Python lists (one per
column), attribute maps are encoded to JSON text by orjson in C, resource and scope
values are computed once per group rather than per span, and the Arrow arrays are
built once per request. Invalid spans (ids of the wrong length, all-zero ids, a kind or
status code outside OTLP's enums, times before 2000 or more than a day ahead of the
collector's clock: see `ingest.records`; an end before the start) are counted and
described for OTLP's `partial_success` instead of failing the batch.

Log records (the GenAI events that arrive on `/v1/logs`) become rows of the same
table with `kind = 'LOG'`: their own deterministic `span_id` (a digest of the record,
so a retried delivery maps to the same key) and the span they describe as
`parent_span_id`. The assembler folds them back into that span's events.
"""

from __future__ import annotations

import base64
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa

from ingest.otlp.decode import ExportLogsServiceRequest, ExportTraceServiceRequest
from ingest.records import EARLIEST_NS, EARLIEST_TIME, MAX_CLOCK_AHEAD
from store.schema import LOG_KIND, SPANS

KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS = ("UNSET", "OK", "ERROR")
_ZERO_TRACE = b"\0" * 16
_ZERO_SPAN = b"\0" * 8
MAX_AHEAD_NS = int(MAX_CLOCK_AHEAD.total_seconds()) * 10**9

# The columns a converted batch carries: the table's, less what the writer stamps.
ROW_SCHEMA = pa.schema([f for f in SPANS.schema if f.name not in ("_written_at", "dt")])


@dataclass
class Converted:
    """Rows made from one request, and what was rejected and why (for `partial_success`)."""

    table: pa.Table
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def error_message(self) -> str:
        if not self.rejected:
            return ""
        shown = "; ".join(self.reasons[:5])
        more = f" (+{len(self.reasons) - 5} more)" if len(self.reasons) > 5 else ""
        return f"{self.rejected} rejected: {shown}{more}"


def any_value(value: Any) -> Any:
    """An OTLP `AnyValue` as a JSON-able Python value."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        number = value.double_value
        return number if math.isfinite(number) else str(number)
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def attributes_dict(attributes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in attributes:
        value = kv.value
        # This loop runs once per attribute of every span: the common case (a non-empty
        # string) costs one field read, everything else falls back to the oneof.
        text = value.string_value
        if text:
            out[kv.key] = text
        elif value.WhichOneof("value") == "int_value":
            out[kv.key] = value.int_value
        else:
            out[kv.key] = any_value(value)
    return out


# JSON columns are built from orjson's UTF-8 bytes as they are (a binary array viewed as
# strings): decoding each document into a Python str only to encode it again cost a copy.
_JSON_COLUMNS = frozenset({"attributes", "events", "resource"})
_NO_EVENTS = b"[]"
_dumps = orjson.dumps


class _Columns:
    """Per-column lists for one batch of rows (times in microseconds, as the table keeps them)."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in ROW_SCHEMA.names}

    def table(self, received_ns: int) -> pa.Table:
        # Times arrive as microseconds (see `spans_from_request`): an Arrow compute call per
        # column and request costs more than one integer division per span.
        n = len(self.cols["trace_id"])
        arrays = [
            pa.repeat(pa.scalar(received_ns // 1000, f.type), n)
            if f.name == "received_at"
            else pa.array(self.cols[f.name], type=pa.binary()).view(f.type)
            if f.name in _JSON_COLUMNS
            else pa.array(self.cols[f.name], type=f.type)
            for f in ROW_SCHEMA
        ]
        return pa.Table.from_arrays(arrays, schema=ROW_SCHEMA)


def _now_ns(received_at: datetime | None) -> int:
    if received_at is None:
        import time

        return time.time_ns()
    return int(received_at.timestamp() * 1_000_000) * 1000


def _resource_values(resource: Any) -> tuple[bytes, str | None]:
    """The `resource` and `service_name` columns of every row from one OTLP resource (spans and
    log records alike), computed once per resource."""
    attrs = attributes_dict(resource.attributes)
    service = attrs.get("service.name")
    return _dumps(attrs), str(service) if service is not None else None


def spans_from_request(
    request: ExportTraceServiceRequest, *, source: str = "otel", received_at: datetime | None = None
) -> Converted:
    """`spans` rows (without `_written_at`/`dt`) for every valid span of an OTLP trace request."""
    columns = _Columns()
    c = columns.cols
    trace_ids, span_ids, parents = c["trace_id"], c["span_id"], c["parent_span_id"]
    names, kinds, starts, ends = c["name"], c["kind"], c["start_time"], c["end_time"]
    codes, messages, attrs_col, events_col = (
        c["status_code"],
        c["status_message"],
        c["attributes"],
        c["events"],
    )
    rejected = 0
    reasons: list[str] = []
    received_ns = _now_ns(received_at)
    latest_ns = received_ns + MAX_AHEAD_NS
    for resource_spans in request.resource_spans:
        resource_json, service = _resource_values(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name or None
            count = 0
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id, span.span_id
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or trace_id == _ZERO_TRACE
                    or span_id == _ZERO_SPAN
                ):
                    rejected += 1
                    reasons.append(
                        f"span `{span.name[:80]}`: invalid ids (trace_id {len(trace_id)} bytes, span_id {len(span_id)} bytes)"
                    )
                    continue
                start = span.start_time_unix_nano or span.end_time_unix_nano  # no start: dated by its end
                end = span.end_time_unix_nano
                status = span.status
                problem = (
                    _time_problem(start, received_ns, latest_ns, "start")
                    or (end and _time_problem(end, received_ns, latest_ns, "end"))
                    or _order_problem(start, end)
                    or (not 0 <= span.kind < len(KINDS) and f"kind {span.kind} is not a SpanKind (0-5)")
                    or (
                        not 0 <= status.code < len(STATUS)
                        and f"status code {status.code} is not a StatusCode (0-2)"
                    )
                )
                if problem:
                    rejected += 1
                    reasons.append(f"span `{span.name[:80]}`: {problem}")
                    continue
                count += 1
                trace_ids.append(trace_id.hex())
                span_ids.append(span_id.hex())
                parent = span.parent_span_id
                parents.append(parent.hex() if len(parent) == 8 and parent != _ZERO_SPAN else None)
                names.append(span.name)
                kinds.append(KINDS[span.kind])
                starts.append(start // 1000)
                ends.append(end // 1000 if end else None)
                codes.append(STATUS[status.code])
                messages.append(status.message or None)
                attrs_col.append(_dumps(attributes_dict(span.attributes)))
                if span.events:
                    events_col.append(
                        _dumps(
                            [
                                {
                                    "name": e.name,
                                    "time": e.time_unix_nano,
                                    "attributes": attributes_dict(e.attributes),
                                }
                                for e in span.events
                            ]
                        )
                    )
                else:
                    events_col.append(_NO_EVENTS)
            c["source"].extend([source] * count)
            c["service_name"].extend([service] * count)
            c["scope_name"].extend([scope] * count)
            c["resource"].extend([resource_json] * count)
    return Converted(columns.table(received_ns), rejected, reasons)


def _order_problem(start: int, end: int) -> str | None:
    """A span that ends before it starts has no duration to store: refused, not clamped, so
    the sender's clock problem shows (OTLP `partial_success`) instead of a zero latency."""
    if end and end < start:
        return f"end time {end} ns is before start time {start} ns"
    return None


def _time_problem(ns: int, received_ns: int, latest_ns: int, what: str) -> str | None:
    """Why a span or record time cannot be stored (`ingest.records` sets the bounds), or None."""
    if ns < EARLIEST_NS:
        return f"{what} time {ns} ns is unset or before {EARLIEST_TIME:%Y-%m-%d}"
    if ns > latest_ns:
        ahead = (ns - received_ns) / 3.6e12
        return f"{what} time {ns} ns is {ahead:.0f} h after it was received (the sender's clock?)"
    return None


def logs_from_request(
    request: ExportLogsServiceRequest, *, source: str = "otel", received_at: datetime | None = None
) -> Converted:
    """`spans` rows of kind LOG for every log record that belongs to a trace (GenAI events)."""
    columns = _Columns()
    c = columns.cols
    rejected = 0
    reasons: list[str] = []
    received_ns = _now_ns(received_at)
    latest_ns = received_ns + MAX_AHEAD_NS
    for resource_logs in request.resource_logs:
        resource_json, service = _resource_values(resource_logs.resource)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope.name or None
            for record in scope_logs.log_records:
                attrs = attributes_dict(record.attributes)
                name = record.event_name or str(attrs.get("event.name") or "") or "log"
                if len(record.trace_id) != 16 or record.trace_id == _ZERO_TRACE:
                    rejected += 1
                    reasons.append(
                        f"log record `{name[:80]}`: no trace context, so it belongs to no trajectory"
                    )
                    continue
                # A record without a time is dated when it arrives, as its observed time would be.
                at = record.time_unix_nano or record.observed_time_unix_nano or received_ns
                problem = _time_problem(at, received_ns, latest_ns, "its")
                if problem:
                    rejected += 1
                    reasons.append(f"log record `{name[:80]}`: {problem}")
                    continue
                digest = hashlib.blake2b(
                    record.SerializeToString(deterministic=True), digest_size=8
                ).hexdigest()
                body = any_value(record.body) if record.HasField("body") else None
                if body is not None:
                    attrs["log.body"] = body
                if record.severity_text:
                    attrs["log.severity_text"] = record.severity_text
                # The table keeps microseconds; event order within a microsecond needs the nanoseconds.
                attrs["log.time_unix_nano"] = at
                c["trace_id"].append(record.trace_id.hex())
                c["span_id"].append(digest)
                c["parent_span_id"].append(record.span_id.hex() if len(record.span_id) == 8 else None)
                c["name"].append(name)
                c["kind"].append(LOG_KIND)
                c["start_time"].append(at // 1000)
                c["end_time"].append(at // 1000)
                c["status_code"].append("UNSET")
                c["status_message"].append(None)
                c["attributes"].append(_dumps(attrs))
                c["events"].append(_NO_EVENTS)
                c["source"].append(source)
                c["service_name"].append(service)
                c["scope_name"].append(scope)
                c["resource"].append(resource_json)
    return Converted(columns.table(received_ns), rejected, reasons)
