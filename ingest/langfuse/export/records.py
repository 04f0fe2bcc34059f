"""Reading a Langfuse export file: its records, each with the line it starts on.

Accepted records (mixed freely in one file):

- **traces** in the `TraceWithFullDetails` shape of the v3/v4 SDKs and UI exports
  (`{id, timestamp, name, userId, sessionId, tags, environment, metadata, ...,
  observations: [...], scores: [...]}`);
- **observations**, v2 (`GET /api/public/v2/observations` items) or legacy;
- **scores**, v3 (`subject`, typed `value`) or v1 (`traceId`, `stringValue`).

File layouts: JSONL (one record per line), a JSON array of records, a single JSON
object, or a saved API response `{"data": [...], "meta": {...}}`; any of them gzip-compressed
or alone in a zip, read within bounds (`ingest.langfuse.source`: a compression bomb, an
over-long line or an over-large document is refused, `ExportUnreadable`, nothing written).

A record that cannot be decoded is yielded as a `RecordProblem` with its line rather than raised
(only a file that cannot be read at all raises): the importer (`ingest.langfuse.export.importer`)
collects every problem and refuses the file.
"""

from __future__ import annotations

import gzip
import json
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from ingest.langfuse.errors import ExportUnreadable, RecordProblem
from ingest.langfuse.source import open_export


def classify_record(record: Any) -> str:
    """`trace`, `observation`, `score` or `unknown` for one decoded record."""
    if not isinstance(record, Mapping):
        return "unknown"
    if "observations" in record or (
        "timestamp" in record
        and "startTime" not in record
        and "dataType" not in record
        and "value" not in record
    ):
        return "trace"
    if "startTime" in record and ("type" in record or "traceId" in record):
        return "observation"
    if "dataType" in record or (
        "name" in record and "value" in record and ("subject" in record or "traceId" in record)
    ):
        return "score"
    return "unknown"


def iter_records(path: Path) -> Iterator[tuple[int, Any | RecordProblem]]:
    """(line number, decoded record or a `RecordProblem`) for every record of an export:
    plain, gzip or a zip of one file, read within `ingest.langfuse.source`'s bounds
    (`ExportUnreadable` past one)."""
    try:
        with open_export(path) as stream:
            head = stream.handle.read(1 << 16)
        with open_export(path) as stream:  # opened again: a zip member cannot rewind
            first = head.decode("utf-8", errors="replace").lstrip()[:1]
            if first == "[" or (first == "{" and _is_single_document(head.decode("utf-8", errors="replace"))):
                yield from _document_records(stream.read_document(b""))
                return
            for number, raw_line in stream.lines():
                yield from _line_records(number, raw_line)
    except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as exc:
        raise ExportUnreadable(str(path), f"its compressed data is damaged ({exc})") from None


def _document_records(raw: bytes) -> Iterator[tuple[int, Any | RecordProblem]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw.count(b"\n", 0, exc.start) + 1
        yield at, RecordProblem(at, "invalid_utf8", f"byte {exc.start} of the file: {exc.reason}")
        return
    yield from _json_document(text)


def _line_records(number: int, raw_line: bytes) -> Iterator[tuple[int, Any | RecordProblem]]:
    data = raw_line.strip()
    if not data:
        return
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        reason = "invalid_utf8" if "UTF-8" in exc.msg else "invalid_json"
        detail = (
            TOO_DEEP if "recursion" in exc.msg or "depth" in exc.msg else f"{exc.msg} at column {exc.colno}"
        )
        yield number, RecordProblem(number, reason, detail)
        return
    if _is_api_page(record):  # a saved API response per line (`{"data": [...], "meta": ...}`)
        for item in record["data"]:
            yield number, item
    else:
        yield number, record


TOO_DEEP = "nested too deep to read (no export nests more than a few dozen levels)"


def _is_api_page(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("data"), list) and "id" not in record


def _is_single_document(head: str) -> bool:
    """A file starting with `{` is JSONL unless its first line alone is not a whole object."""
    first_line = head.split("\n", 1)[0].strip()
    try:
        orjson.loads(first_line)
    except orjson.JSONDecodeError as exc:
        # The object continues on the next lines (a pretty-printed document), unless the
        # line is whole but unreadable (too deep, not UTF-8): JSONL, reported per line.
        return not any(m in str(exc) for m in ("depth limit", "not valid UTF-8"))
    return False


def _json_document(text: str) -> Iterator[tuple[int, Any | RecordProblem]]:
    """Records of a JSON document, each with the line it starts on."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    line_at = _LineCounter(text)
    if pos < len(text) and text[pos] == "{":
        decoded = _decode_at(decoder, text, pos, line_at)
        if isinstance(decoded, RecordProblem):
            yield decoded.line, decoded
            return
        obj = decoded[0]
        if _is_api_page(obj):
            # A saved API response: line numbers of items are not tracked inside it.
            for index, item in enumerate(obj["data"]):
                yield (
                    line_at(pos),
                    item
                    if isinstance(item, dict)
                    else RecordProblem(line_at(pos), "unknown_record", f"data[{index}] is not an object"),
                )
            return
        yield line_at(pos), obj
        return
    pos += 1  # past "["
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            yield (
                line_at(pos),
                RecordProblem(line_at(pos), "invalid_json", "the array is not closed (truncated file?)"),
            )
            return
        if text[pos] == "]":
            return
        decoded = _decode_at(decoder, text, pos, line_at)
        if isinstance(decoded, RecordProblem):
            yield decoded.line, decoded
            return
        obj, end = decoded
        yield line_at(pos), obj
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] != "]":
            yield (
                line_at(pos),
                RecordProblem(line_at(pos), "invalid_json", f"expected `,` or `]`, found {text[pos]!r}"),
            )
            return


def _decode_at(
    decoder: json.JSONDecoder, text: str, pos: int, line_at: _LineCounter
) -> tuple[Any, int] | RecordProblem:
    """The JSON value starting at `pos` and the offset after it, or why none can be read there
    (which ends the document: nothing after a broken value can be trusted)."""
    try:
        return decoder.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        return RecordProblem(exc.lineno, "invalid_json", f"{exc.msg} at column {exc.colno}")
    except RecursionError:
        return RecordProblem(line_at(pos), "invalid_json", TOO_DEEP)


class _LineCounter:
    """Line number of increasing offsets in `text`, counted incrementally."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def __call__(self, pos: int) -> int:
        if pos < self.pos:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos
