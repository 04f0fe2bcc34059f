"""Decode OTLP/HTTP request bodies: content types, gzip with a decompression-bomb limit, hex ids in JSON.

Pure functions from (bytes, headers) to a protobuf request message, raising the ingest
errors that map to the specification's answers (400, 413, 415). Two traps handled here:

- OTLP/JSON carries `traceId`/`spanId`/`parentSpanId` as hex, but protobuf's
  `json_format.ParseDict` reads bytes fields as base64 and silently produces wrong
  bytes, so ids are converted to base64 first (and rejected if they are not hex);
- a gzip body is inflated incrementally with a hard cap, so a small bomb cannot
  allocate gigabytes before the size check.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ingest.errors import MalformedPayload, PayloadTooLarge, UnsupportedMediaType

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)
ENCODINGS = ("identity", "gzip", "deflate")
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")

M = TypeVar("M", bound=Message)

__all__ = [
    "JSON",
    "PROTOBUF",
    "ExportLogsServiceRequest",
    "ExportLogsServiceResponse",
    "ExportMetricsServiceRequest",
    "ExportMetricsServiceResponse",
    "ExportTraceServiceRequest",
    "ExportTraceServiceResponse",
    "decode_logs",
    "decode_metrics",
    "decode_traces",
    "inflate",
    "media_type",
]


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header; 415 for anything but protobuf or JSON."""
    bare = (content_type or "").split(";", 1)[0].strip().lower()
    if bare not in CONTENT_TYPES:
        raise UnsupportedMediaType("Content-Type", content_type or "(none)", CONTENT_TYPES)
    return bare


def inflate(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body with its Content-Encoding removed, never producing more than `limit` bytes."""
    if len(body) > limit:
        raise PayloadTooLarge(limit, decompressed=False)
    header = (content_encoding or "").strip()
    encodings = [e.strip().lower() for e in header.split(",")] if header else []
    if "" in encodings:  # `gzip,` or `, ,`: a list with a hole is no list of codings
        raise UnsupportedMediaType("Content-Encoding", content_encoding or "", ENCODINGS)
    for encoding in reversed(encodings):
        if encoding == "identity":
            continue
        if encoding not in ("gzip", "deflate", "x-gzip"):
            raise UnsupportedMediaType("Content-Encoding", content_encoding or "", ENCODINGS)
        body = _inflate_one(body, encoding, limit)
    return body


def _inflate_one(body: bytes, encoding: str, limit: int) -> bytes:
    """One coding removed. A gzip body may be several members one after another (RFC 1952
    §2.2, what `cat a.gz b.gz` makes); anything else after the stream is refused, not ignored."""
    gzip = encoding in ("gzip", "x-gzip")
    wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
    out = bytearray()
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise MalformedPayload(f"{encoding} body", str(exc)) from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise PayloadTooLarge(limit, decompressed=True)
        if not inflater.eof:
            raise MalformedPayload(f"{encoding} body", "truncated compressed stream")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
        if not (gzip and rest[:2] == b"\x1f\x8b"):
            raise MalformedPayload(
                f"{encoding} body", f"{len(rest)} bytes of trailing data after the compressed stream"
            )


def _hex_to_b64(value: Any, path: str) -> Any:
    if value is None:  # JSON null: the field's default, as ParseDict reads it
        return value
    if not isinstance(value, str):
        raise MalformedPayload("OTLP/JSON", f"id is a {type(value).__name__}, not a hex string", path=path)
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise MalformedPayload("OTLP/JSON", f"id {value[:64]!r} is not hex", path=path) from None
    return base64.b64encode(raw).decode("ascii")


def _fix_ids(node: Any, path: str = "") -> None:
    """Rewrite every hex id in an OTLP/JSON document (spans, links, log records) to base64, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS:
                node[key] = _hex_to_b64(value, f"{path}.{key}")
            elif isinstance(value, (dict, list)) and key not in ("attributes", "body", "resource"):
                _fix_ids(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _fix_ids(item, f"{path}[{i}]")


def _decode(message: M, body: bytes, media: str, what: str) -> M:
    if media == PROTOBUF:
        try:
            message.ParseFromString(body)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise MalformedPayload(f"{what} protobuf", str(exc) or "cannot parse") from None
        return message
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedPayload(f"{what} JSON", str(exc)[:200]) from None
    if not isinstance(document, dict):
        raise MalformedPayload(f"{what} JSON", f"expected an object, got {type(document).__name__}")
    _check_signal(document, message, what)
    try:
        _fix_ids(document)
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except MalformedPayload:
        raise
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise MalformedPayload(f"{what} JSON", str(exc)[:300]) from None
    except SystemError as exc:
        # upb's way of failing on a key that is a lone surrogate (`"\\udfff"`): not valid Unicode.
        cause = exc.__cause__ or exc.__context__ or exc
        raise MalformedPayload(f"{what} JSON", f"text that is not valid Unicode ({cause})"[:300]) from None
    return message


# The top-level field of each OTLP export request, to tell a document sent to the wrong endpoint.
_SIGNALS = {
    "resourceSpans": "/v1/traces",
    "resource_spans": "/v1/traces",
    "resourceLogs": "/v1/logs",
    "resource_logs": "/v1/logs",
    "resourceMetrics": "/v1/metrics",
    "resource_metrics": "/v1/metrics",
}


def _check_signal(document: dict[str, Any], message: Message, what: str) -> None:
    """Refuse a JSON document of another signal (a traces request on /v1/logs): parsed with
    unknown fields ignored, it would otherwise be an empty request, answered 200."""
    own = {f.json_name for f in message.DESCRIPTOR.fields} | {f.name for f in message.DESCRIPTOR.fields}
    if own & document.keys():
        return
    for key in document.keys() & _SIGNALS.keys():
        raise MalformedPayload(
            f"{what} JSON", f"the document holds `{key}`: send it to {_SIGNALS[key]}", path=key
        )


def decode_traces(
    body: bytes, content_type: str | None, content_encoding: str | None, limit: int
) -> ExportTraceServiceRequest:
    """An `ExportTraceServiceRequest` from an HTTP body; raises 400/413/415 errors."""
    return _decode_body(ExportTraceServiceRequest(), body, content_type, content_encoding, limit)


def decode_logs(
    body: bytes, content_type: str | None, content_encoding: str | None, limit: int
) -> ExportLogsServiceRequest:
    """An `ExportLogsServiceRequest` from an HTTP body; raises 400/413/415 errors."""
    return _decode_body(ExportLogsServiceRequest(), body, content_type, content_encoding, limit)


def decode_metrics(
    body: bytes, content_type: str | None, content_encoding: str | None, limit: int
) -> ExportMetricsServiceRequest:
    """An `ExportMetricsServiceRequest` from an HTTP body; raises 400/413/415 errors."""
    return _decode_body(ExportMetricsServiceRequest(), body, content_type, content_encoding, limit)


def _decode_body(
    message: M, body: bytes, content_type: str | None, content_encoding: str | None, limit: int
) -> M:
    """`message` filled from an HTTP body, whatever the signal: the media type is checked (415)
    before the body is inflated (413), then parsed (400)."""
    media = media_type(content_type)
    return _decode(message, inflate(body, content_encoding, limit), media, message.DESCRIPTOR.name)


def metric_points(request: ExportMetricsServiceRequest) -> dict[str, int]:
    """Data points per metric name in a metrics request (what `/v1/metrics` acknowledges and counts)."""
    points: dict[str, int] = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                count = len(getattr(metric, kind).data_points) if kind else 0
                points[metric.name] = points.get(metric.name, 0) + count
    return points


def encode_response(message: Message, media: str) -> bytes:
    """A response body in the request's own encoding, as the specification asks."""
    if media == PROTOBUF:
        return message.SerializeToString()
    return json.dumps(json_format.MessageToDict(message)).encode()
