"""Print a recording's requests as readable JSON (spans, log records, metrics), for eyes and diffs.

    python -m tests.ingest.frameworks.dump CONFIG [--full]

Spans are printed one per line-block: name, kind, ids (hex), status, attributes (values
truncated to 300 characters unless --full), events; log records with their body and
attributes; metrics by name with their data-point type. Decoding uses the project's
OTLP decoder (`ingest.otlp`), so it reads protobuf, JSON, gzip alike.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

HERE = Path(__file__).resolve().parent


def raw_body(path: Path, encoding: str | None) -> bytes:
    body = path.read_bytes()
    if (encoding or "").lower() in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if (encoding or "").lower() == "deflate":
        return zlib.decompress(body)
    return body


def decode(entry: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """The request as a dict (OTLP JSON shape with hex ids), or the JSON document for non-OTLP paths."""
    if not entry.get("body_file"):
        return None
    body = raw_body(folder / entry["body_file"], entry.get("content_encoding"))
    path = entry["path"]
    kind = path.rsplit("/", 1)[-1]
    message: Any = {
        "traces": ExportTraceServiceRequest,
        "logs": ExportLogsServiceRequest,
        "metrics": ExportMetricsServiceRequest,
    }.get(kind)
    if message is None or "/v1/" not in path:
        try:
            return json.loads(body)
        except ValueError:
            return {"_raw": body[:2000].decode("utf-8", "replace")}
    if "json" in (entry.get("content_type") or ""):
        return json.loads(body)
    parsed = message()
    parsed.ParseFromString(body)
    document = json_format.MessageToDict(parsed)
    _hex_ids(document)
    return document


def _hex_ids(node: Any) -> None:
    import base64

    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def value_of(any_value: dict[str, Any]) -> Any:
    if not any_value:
        return None
    (kind, value), *_ = any_value.items()
    if kind == "arrayValue":
        return [value_of(v) for v in value.get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: value_of(kv.get("value", {})) for kv in value.get("values", [])}
    if kind == "intValue":
        return int(value)
    return value


def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: value_of(kv.get("value", {})) for kv in items or []}


def short(value: Any, full: bool) -> Any:
    if full:
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 300 else text[:300] + f"...(+{len(text) - 300})"


def main() -> None:
    name = sys.argv[1]
    full = "--full" in sys.argv
    folder = HERE / "recordings" / name
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["requests"]:
        print(
            f"#{entry['index']} {entry['method']} {entry['path']} {entry['content_type']} {entry['content_encoding']}"
        )
        document = decode(entry, folder)
        if document is None:
            continue
        if entry["path"].endswith("/traces"):
            for rs in document.get("resourceSpans", []):
                print("  resource", short(attrs(rs.get("resource", {}).get("attributes", [])), full))
                for ss in rs.get("scopeSpans", []):
                    print("  scope", ss.get("scope", {}).get("name"), ss.get("scope", {}).get("version"))
                    for span in ss.get("spans", []):
                        print(
                            f"   SPAN {span['name']!r} kind={span.get('kind')} id={span.get('spanId')} "
                            f"parent={span.get('parentSpanId')} trace={span.get('traceId')} status={span.get('status')}"
                        )
                        for key, value in attrs(span.get("attributes", [])).items():
                            print(f"      {key} = {short(value, full)}")
                        for event in span.get("events", []):
                            print(
                                f"      EVENT {event.get('name')} {short(attrs(event.get('attributes', [])), full)}"
                            )
        elif entry["path"].endswith("/logs"):
            for rl in document.get("resourceLogs", []):
                for sl in rl.get("scopeLogs", []):
                    print("  scope", sl.get("scope", {}).get("name"))
                    for record in sl.get("logRecords", []):
                        print(
                            f"   LOG event={record.get('eventName')} span={record.get('spanId')} "
                            f"body={short(value_of(record.get('body', {})), full)}"
                        )
                        for key, value in attrs(record.get("attributes", [])).items():
                            print(f"      {key} = {short(value, full)}")
        elif entry["path"].endswith("/metrics"):
            for rm in document.get("resourceMetrics", []):
                for sm in rm.get("scopeMetrics", []):
                    names = [
                        f"{m['name']}({next((k for k in m if k not in ('name', 'description', 'unit', 'metadata')), '?')})"
                        for m in sm.get("metrics", [])
                    ]
                    print("  scope", sm.get("scope", {}).get("name"), names)
        else:
            print("  ", short(document, full))


if __name__ == "__main__":
    main()
