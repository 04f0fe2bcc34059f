"""Erasing traces from collectors' spools: rows acknowledged but not yet in the lake.

A spool segment holds span rows between their 200 and the flush that commits them. A
`forget` that erased the lake but left them in a segment would see them land again a few
seconds later. So before the lake is touched:

A user's or session's spans are found as in the lake (`store.identity`: the identity keys,
JSON decoded), and their traces go whole: every spooled row of such a trace, whichever
segment holds it.

- a spool no live process owns (a collector that died) is locked by `forget` itself and
  each segment holding erased traces is rewritten without their rows (written whole under
  a temporary name, fsynced, renamed over: a crash leaves the old segment or the new one);
- a live collector's spool is never written by anyone else: `forget` waits for it to flush
  the erased traces' rows into the lake (it seals segments every `flush_seconds`), where the
  lake erasure that follows removes them. A collector that keeps them past the wait makes
  `forget` stop before erasing anything, saying which spool.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import SpoolBusy
from ingest.otlp.spool.ownership import lock_directory
from ingest.otlp.spool.records import decode_table, encode_table, frame, read_segment, split_records
from store.identity import IDENTITY_COLUMNS, identity_matches


@dataclass
class SpoolErasure:
    """What erasing from the spools did: rows removed from dead spools, rows still waiting in
    live ones (by directory)."""

    rows_removed: int = 0
    segments_rewritten: int = 0
    waiting: dict[str, int] = field(default_factory=dict)


def segments_of(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.wal"))


def spool_dirs(root: Path) -> list[Path]:
    """Every spool directory under a spool root (and the root itself when it holds segments)."""
    if not root.is_dir():
        return []
    dirs = [p for p in sorted(root.iterdir()) if p.is_dir()]
    return ([root] if segments_of(root) else []) + dirs


Identity = tuple[str, str]  # (`user_id` or `session_id`, its value)


def identity_traces(table: pa.Table, identity: Identity | None) -> set[str]:
    """The traces of `table`'s rows that name the user or session under an identity key."""
    if identity is None or "trace_id" not in table.column_names:
        return set()
    kind, value = identity
    columns = [c for c in IDENTITY_COLUMNS if c in table.column_names]
    if not columns:
        return set()
    rows = table.select(["trace_id", *columns]).to_pylist()
    return {str(row["trace_id"]) for row in rows if identity_matches(row, kind, value)}


def matching_rows(table: pa.Table, trace_ids: pa.Array, identity: Identity | None = None) -> pa.Array:
    """A mask of the rows of erased traces, and of the traces whose rows name the user or session
    of `identity` under an identity key (a user's spans that are in no lake table yet)."""
    if "trace_id" not in table.column_names:
        return pa.array([False] * table.num_rows)
    found = identity_traces(table, identity)
    wanted = pa.concat_arrays([trace_ids, pa.array(sorted(found), pa.string())]) if found else trace_ids
    return pc.fill_null(pc.is_in(table.column("trace_id").cast(pa.string()), value_set=wanted), False)


def count_in_segment(path: Path, trace_ids: pa.Array, identity: Identity | None = None) -> int:
    records, _ = read_segment(path)
    return sum(pc.sum(matching_rows(decode_table(r), trace_ids, identity)).as_py() or 0 for r in records)


def spooled_identity_traces(root: Path, identity: Identity | None) -> set[str]:
    """The traces any spool under `root` holds a row of naming `identity` (a trace's spans may
    lie in several records and segments: all of them go)."""
    if identity is None:
        return set()
    found: set[str] = set()
    for directory in spool_dirs(root):
        for segment in segments_of(directory):
            try:
                records, _ = read_segment(segment)
            except FileNotFoundError:  # sealed and flushed meanwhile
                continue
            for record in records:
                found |= identity_traces(decode_table(record), identity)
    return found


def rewrite_segment(path: Path, trace_ids: pa.Array, identity: Identity | None = None) -> int:
    """Rewrite one segment without the erased traces' rows; returns the rows removed."""
    records, _ = read_segment(path)
    kept: list[bytes] = []
    removed = 0
    for record in records:
        table = decode_table(record)
        mask = matching_rows(table, trace_ids, identity)
        hits = pc.sum(mask).as_py() or 0
        if not hits:
            kept.append(frame(record))
            continue
        removed += hits
        rest = table.filter(pc.invert(mask))
        if rest.num_rows:
            kept.append(frame(encode_table(rest)))
    if not removed:
        return 0
    temp = path.with_suffix(".erasing")
    with open(temp, "wb") as handle:
        for chunk in kept:
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return removed


def count_in_spools(root: Path, trace_ids: Iterable[str], identity: Identity | None = None) -> int:
    """Rows of `trace_ids`, or of traces naming `identity`, in every spool under `root` (a dry run)."""
    wanted = pa.array(sorted(set(trace_ids) | spooled_identity_traces(root, identity)), pa.string())
    return sum(
        count_in_segment(segment, wanted)
        for directory in spool_dirs(root)
        for segment in segments_of(directory)
        if segment.exists()
    )


def segment_as_json(data: bytes) -> bytes:
    """A spool segment's rows as JSON text, for searching erased values in it (Arrow IPC keeps
    strings raw, but not quoted as whole values)."""
    records, _, _ = split_records(memoryview(data))
    rows = [row for record in records for row in decode_table(record).to_pylist()]
    return json.dumps(rows, default=str).encode()


def erase_from_spools(
    root: Path,
    trace_ids: Iterable[str],
    identity: Identity | None = None,
    *,
    wait_s: float = 30.0,
    poll_s: float = 0.5,
) -> SpoolErasure:
    """Remove the rows of `trace_ids`, and of traces naming `identity`, from every spool under
    `root`: rewrite the segments of spools no process owns, wait up to `wait_s` for live
    collectors to flush theirs."""
    outcome = SpoolErasure()
    traces = set(trace_ids)
    if not traces and identity is None:
        return outcome
    wanted = pa.array(sorted(traces | spooled_identity_traces(root, identity)), pa.string())
    deadline = time.monotonic() + wait_s
    for directory in spool_dirs(root):
        while True:
            try:
                fd = lock_directory(directory)
            except SpoolBusy:
                waiting = sum(
                    count_in_segment(p, wanted, identity) for p in segments_of(directory) if p.exists()
                )
                if waiting and time.monotonic() < deadline:
                    time.sleep(poll_s)
                    continue
                if waiting:
                    outcome.waiting[str(directory)] = waiting
                break
            try:
                for segment in segments_of(directory):
                    removed = rewrite_segment(segment, wanted, identity)
                    outcome.rows_removed += removed
                    outcome.segments_rewritten += bool(removed)
            finally:
                os.close(fd)  # releases the lock: a collector starting now adopts what is left
            break
    return outcome
