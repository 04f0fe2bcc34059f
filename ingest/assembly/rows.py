"""A `spans` table as Python rows: grouped by trace, keyed by span id, attributes and events parsed.

The columnar-to-row step every normaliser reads from (`span_dicts`). Times are integer
microseconds since the epoch; `attributes`/`events` are parsed with orjson from their JSON text
(the attributes where Arrow keeps them, `_json_views`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ingest.assembly.normalize import Span
from store.schema import WRITTEN_AT

# The columns assembly reads (the resource JSON and arrival time are not among them).
_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "source",
    "start_time",
    "end_time",
    "status_code",
    "status_message",
    "service_name",
    "attributes",
    "events",
)


def span_dicts(spans: pa.Table) -> list[Span]:
    """Rows of a `spans` table as dicts with parsed `attributes`/`events` and `start_time`/`end_time`
    in microseconds since the epoch, newest row per key."""
    return [span for trace in spans_by_trace(spans).values() for span in trace.values()]


def spans_by_trace(spans: pa.Table) -> dict[str, dict[str, Span]]:
    """`span_dicts` grouped by trace, then keyed by span id, in first-seen order."""
    by_trace = raw_rows_by_trace(spans)
    for trace in by_trace.values():
        parse_json(trace.values())
    return by_trace


def raw_rows_by_trace(spans: pa.Table) -> dict[str, dict[str, Span]]:
    """The rows grouped by trace and keyed by span id (first-seen order, newest row per key), with
    `attributes`/`events` still JSON text (`parse_json`)."""
    names = [c for c in _COLUMNS if c in spans.column_names]
    if WRITTEN_AT in spans.column_names:
        # A lake read has one row per key already; an in-memory batch may repeat a key: newest wins.
        spans = spans.sort_by([(WRITTEN_AT, "ascending")])
    # Times as integer microseconds since the epoch: building a timezone-aware datetime per value
    # cost more than half of this function; rows get datetimes back in `trajectory`.
    columns = [_column(spans.column(c), c) for c in names]
    by_trace: dict[str, dict[str, Span]] = {}
    for row in _rows(names, columns):
        # Grouped and de-duplicated in one step: a repeated key keeps its first place, newest row.
        trace = by_trace.get(row["trace_id"])
        if trace is None:
            trace = by_trace[row["trace_id"]] = {}
        trace[row["span_id"]] = row
    return by_trace


def _rows(names: list[str], columns: list[list[Any]]) -> Iterator[Span]:
    if len(names) == len(_COLUMNS):  # every column (the usual table): a dict display, built at once
        for (
            trace,
            span,
            parent,
            name,
            kind,
            source,
            start,
            end,
            status,
            message,
            service,
            attrs,
            events,
        ) in zip(*columns, strict=True):
            yield {
                "trace_id": trace,
                "span_id": span,
                "parent_span_id": parent,
                "name": name,
                "kind": kind,
                "source": source,
                "start_time": start,
                "end_time": end,
                "status_code": status,
                "status_message": message,
                "service_name": service,
                "attributes": attrs,
                "events": events,
            }
    else:
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))


def parse_json(rows: Iterable[Span]) -> list[Span]:
    """The rows with their `attributes`/`events` JSON parsed, in place."""
    out = list(rows)
    for row in out:
        row["attributes"] = _attributes(row.get("attributes"))
        events = row.get("events")
        row["events"] = _events(events) if events and events != b"[]" else []  # most spans have none
    return out


def _attributes(text: bytes | memoryview | str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _events(text: bytes | str) -> list[dict[str, Any]]:
    """An event is an object with an attributes object; anything else is no event we can read."""
    try:
        events = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(events, list):
        return []
    return [
        {**e, "attributes": e["attributes"] if isinstance(e.get("attributes"), dict) else {}}
        for e in events
        if isinstance(e, dict)
    ]


def _column(column: pa.ChunkedArray, name: str) -> list[Any]:
    if name in ("start_time", "end_time"):
        return pc.cast(column, pa.int64()).to_pylist()
    if name == "attributes" and (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return _json_views(column)
    if name == "events" and pa.types.is_string(column.type):
        # JSON text as bytes (valid UTF-8 already: orjson reads it without a decode into str). Not
        # views: most are `[]`, and testing a view for that compares item by item (14% more
        # instructions for assembly when events were views too).
        return pc.cast(column, pa.binary()).to_pylist()
    if name != "span_id" and pa.types.is_string(column.type) and len(column):
        return _shared_strings(column)
    return column.to_pylist()


def _shared_strings(column: pa.ChunkedArray) -> list[str | None]:
    """The column's values, one str object per distinct value. Trace ids, span names, kinds and
    services repeat span after span: a str per row was a page of fresh memory per 60 rows, a hash
    computed per row (each a dict key or compared), and most of this step's time."""
    encoded = pc.dictionary_encode(column)  # one dictionary, shared by every (non-empty) chunk
    values = np.array([*encoded.chunk(0).dictionary.to_pylist(), None], dtype=object)
    missing = len(values) - 1
    indices = [pc.fill_null(chunk.indices, missing).to_numpy() for chunk in encoded.chunks]
    shared: list[str | None] = values[np.concatenate(indices)].tolist()
    return shared


def _json_views(column: pa.ChunkedArray) -> list[memoryview | None]:
    """Each value's JSON text as a view into Arrow's own buffer, where orjson reads it: a copy into
    a bytes object per row (the attributes hold the multi-KB histories) cost a twentieth of assembly."""
    # The offsets read in place, 32- or 64-bit (a cast to one width copied the whole column: a
    # page fault per 4 KiB of fresh memory, a tenth of a cold assembly's time).
    wide = pa.types.is_large_string(column.type)
    views: list[memoryview | None] = []
    for chunk in column.chunks:
        count = len(chunk)
        _, offset_buffer, data_buffer = chunk.buffers()
        first = chunk.offset
        raw_offsets = memoryview(offset_buffer)
        all_offsets = raw_offsets.cast("q") if wide else raw_offsets.cast("i")
        offsets = all_offsets[first : first + count + 1].tolist()
        data = memoryview(data_buffer if data_buffer is not None else b"")
        chunk_views: list[memoryview | None] = [data[offsets[i] : offsets[i + 1]] for i in range(count)]
        if chunk.null_count:
            valid = chunk.is_valid().to_pylist()
            chunk_views = [view if ok else None for view, ok in zip(chunk_views, valid, strict=True)]
        views += chunk_views
    return views
