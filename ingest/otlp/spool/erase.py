"""Erasing traces from collectors' spools: rows acknowledged but not yet in the lake.

A spool segment holds span rows between their 200 and the flush that commits them. A
`forget` that erased the lake but left them in a segment would see them land again a few
seconds later. So before the lake is touched:

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


def matching_rows(table: pa.Table, trace_ids: pa.Array, mentions: tuple[str, ...] = ()) -> pa.Array:
    """A mask of the rows of erased traces, and of rows whose attributes or resource mention
    one of `mentions` (a user's or session's spans that are in no lake table yet)."""
    mask = pa.array([False] * table.num_rows)
    if "trace_id" in table.column_names:
        mask = pc.is_in(table.column("trace_id").cast(pa.string()), value_set=trace_ids)
    for column in ("attributes", "resource"):
        if column in table.column_names:
            for text in mentions:
                mask = pc.or_(mask, pc.match_substring(table.column(column).cast(pa.string()), text))
    return pc.fill_null(mask, False)


def count_in_segment(path: Path, trace_ids: pa.Array, mentions: tuple[str, ...] = ()) -> int:
    records, _ = read_segment(path)
    return sum(pc.sum(matching_rows(decode_table(r), trace_ids, mentions)).as_py() or 0 for r in records)


def rewrite_segment(path: Path, trace_ids: pa.Array, mentions: tuple[str, ...] = ()) -> int:
    """Rewrite one segment without the erased traces' rows; returns the rows removed."""
    records, _ = read_segment(path)
    kept: list[bytes] = []
    removed = 0
    for record in records:
        table = decode_table(record)
        mask = matching_rows(table, trace_ids, mentions)
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


def count_in_spools(root: Path, trace_ids: Iterable[str], mentions: Iterable[str] = ()) -> int:
    """Rows of `trace_ids` (or mentioning `mentions`) in every spool under `root` (a dry run)."""
    wanted = pa.array(sorted(set(trace_ids)), pa.string())
    quoted = tuple(json.dumps(m) for m in mentions)
    return sum(
        count_in_segment(segment, wanted, quoted)
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
    mentions: Iterable[str] = (),
    *,
    wait_s: float = 30.0,
    poll_s: float = 0.5,
) -> SpoolErasure:
    """Remove the rows of `trace_ids` from every spool under `root`: rewrite the segments of
    spools no process owns, wait up to `wait_s` for live collectors to flush theirs."""
    wanted = pa.array(sorted(set(trace_ids)), pa.string())
    quoted = tuple(json.dumps(m) for m in mentions)  # as the attributes' JSON text holds them
    outcome = SpoolErasure()
    if not len(wanted) and not quoted:
        return outcome
    deadline = time.monotonic() + wait_s
    for directory in spool_dirs(root):
        while True:
            try:
                fd = lock_directory(directory)
            except SpoolBusy:
                waiting = sum(
                    count_in_segment(p, wanted, quoted) for p in segments_of(directory) if p.exists()
                )
                if waiting and time.monotonic() < deadline:
                    time.sleep(poll_s)
                    continue
                if waiting:
                    outcome.waiting[str(directory)] = waiting
                break
            try:
                for segment in segments_of(directory):
                    removed = rewrite_segment(segment, wanted, quoted)
                    outcome.rows_removed += removed
                    outcome.segments_rewritten += bool(removed)
            finally:
                os.close(fd)  # releases the lock: a collector starting now adopts what is left
            break
    return outcome
