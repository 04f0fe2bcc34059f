"""The lake edge of assembly: one path from stored spans to trajectories and rewards.

`assemble` (`ingest.assembly`) is pure; this module is the I/O around it, shared by
every source: the OTLP collector and in-process exporter (traces that just completed),
the Langfuse puller and importer (traces a page touched), and `trajlake assemble`
(every trace, or those since a date).

- `spans_of_traces` is the one reader of "the spans of these traces": the newest row
  of each span, every span of each trace (a trace is always assembled whole, so a late
  span rebuilds the complete trajectory rather than a partial one), in chunks that never
  split a trace, so memory is bounded by the chunk size, not the lake;
- `assemble_traces` assembles those chunks (in worker processes when asked; assembly
  is pure Python) and writes trajectories in one all-or-nothing write, then rewards;
- `rebuild` does the same for every trace with spans (optionally since a date).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from datetime import date, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from ingest.assembly import Assembled, assemble
from ingest.redact import redact_table
from store.catalog.connection import connect
from store.lake import Lake
from store.schema import INGEST_ERRORS, LABELS, PARTITION_COLUMN, REWARDS, SPANS, TRAJECTORIES, WRITTEN_AT
from store.vocabulary import SPAN_SOURCES, equals, one_of
from store.writer import write

log = logging.getLogger("trajlake.ingest.lakeio")

LakeLike = Lake | str | os.PathLike[str]
CHUNK_ROWS = 50_000


@dataclass
class AssembleResult:
    """What one assembly pass wrote."""

    traces: int = 0
    trajectories: int = 0
    rewards: int = 0
    labels: int = 0  # feedback that carried the right answer
    failed: int = 0  # traces whose assembly failed: rows in `ingest_errors`, spans kept

    def add(self, other: AssembleResult) -> None:
        self.traces += other.traces
        self.trajectories += other.trajectories
        self.rewards += other.rewards
        self.labels += other.labels
        self.failed += other.failed

    def summary(self) -> str:
        failed = (
            f"; {self.failed:,} traces failed to assemble (their spans are kept; see "
            f"`SELECT * FROM ingest_errors WHERE {equals('status', 'failed', table='ingest_errors')}`)"
            if self.failed
            else ""
        )
        return (
            f"{self.traces:,} traces -> {self.trajectories:,} trajectories, {self.rewards:,} rewards{failed}"
        )


def spans_of_traces(
    lake: LakeLike,
    trace_ids: Iterable[str] | None,
    *,
    since: date | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[pa.Table]:
    """The newest row of every span of the given traces (all traces: `None`), ordered by trace,
    in tables that never split a trace. `since`: only traces with a span on or after that day
    (each still read whole: a trace crossing midnight is never rebuilt from half its spans)."""
    lake = Lake.of(lake)
    wanted = None if trace_ids is None else sorted(set(trace_ids))
    if wanted == [] or not lake.has_table(SPANS.name):
        return
    with connect(lake, read_only=True) as con:
        where = []
        if wanted is not None:
            con.register("__wanted", pa.table({"trace_id": pa.array(wanted, pa.string())}))
            where.append("trace_id IN (SELECT trace_id FROM __wanted)")
        if since is not None:
            where.append(f"trace_id IN (SELECT trace_id FROM spans WHERE {PARTITION_COLUMN} >= $since)")
        sql = (
            f"SELECT * EXCLUDE ({WRITTEN_AT}) FROM spans "
            + (f"WHERE {' AND '.join(where)} " if where else "")
            + "ORDER BY trace_id, start_time, span_id"
        )
        reader = con.sql(sql, params={"since": since} if since else None).to_arrow_reader(chunk_rows)
        carry: pa.Table | None = None
        for batch in reader:
            table = (
                pa.Table.from_batches([batch])
                if carry is None
                else pa.concat_tables([carry, pa.Table.from_batches([batch])])
            )
            if table.num_rows == 0:
                continue
            ids = table.column("trace_id")
            last = ids[-1].as_py()
            cut = pc.index(ids, last).as_py()  # rows are ordered by trace: the last trace starts here
            carry = table.slice(cut)
            if cut:
                yield table.slice(0, cut)
        if carry is not None and carry.num_rows:
            yield carry


def _assemble_chunk(spans: pa.Table) -> Assembled:
    """One chunk assembled; top level so worker processes can run it."""
    return assemble(spans)


def _chunks_in_order(chunks: Iterator[pa.Table], workers: int) -> Iterator[Assembled]:
    """`_assemble_chunk` over `chunks`, in order; with `workers` > 1 in that many processes,
    at most two chunks per worker in flight so memory stays bounded."""
    if workers <= 1:
        yield from map(_assemble_chunk, chunks)
        return
    # spawn, not fork: the parent holds DuckDB and Arrow thread pools that must not be forked.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending: deque[Future[Assembled]] = deque()
        for chunk in chunks:
            pending.append(pool.submit(_assemble_chunk, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def write_chunks(
    lake: LakeLike,
    chunks: Iterator[pa.Table],
    *,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> AssembleResult:
    """Assemble span chunks and write the trajectories (one all-or-nothing write), then the rewards.

    A trajectory's earlier row, if any, was assembled from some of the same spans, so it is
    in one of the `dt` partitions those spans fall on: the write looks for it only there.
    """
    result = AssembleResult()
    rewards: list[pa.Table] = []
    labels: list[pa.Table] = []
    failures: list[pa.Table] = []
    assembled: list[str] = []
    span_days: set[date] = set()  # filled while the write reads the chunks, used when it commits

    def noting_days(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in tables:
            span_days.update(pc.unique(table.column(PARTITION_COLUMN)).to_pylist())
            yield table

    def trajectories() -> Iterator[pa.Table]:
        for chunk in _chunks_in_order(noting_days(chunks), workers):
            result.traces += chunk.traces
            if chunk.rewards.num_rows:
                rewards.append(redact_table(chunk.rewards, None))
            if chunk.labels.num_rows:
                labels.append(redact_table(chunk.labels, None))
            if chunk.failed:
                failures.append(chunk.failures)
            assembled.extend(chunk.assembled_ids)
            if progress is not None:
                progress(result.traces)
            # The spans were redacted, but assembly decodes their JSON (escapes included),
            # so the secret rules run again over what is stored.
            yield redact_table(chunk.trajectories, None)

    result.trajectories = write(lake, TRAJECTORIES.name, trajectories(), within=span_days).rows
    if rewards:
        result.rewards = write(lake, REWARDS.name, rewards).rows
    if labels:
        result.labels = write(lake, LABELS.name, labels).rows
    if failures:
        result.failed = write(lake, INGEST_ERRORS.name, failures).rows
        log.warning("%d trace(s) failed to assemble; recorded in `ingest_errors`", result.failed)
    _resolve_failures(Lake.of(lake), assembled)
    return result


def _resolve_failures(lake: Lake, assembled: list[str]) -> None:
    """Mark earlier failures of traces that have now gone through as resolved."""
    if not assembled or not lake.has_table(INGEST_ERRORS.name):
        return
    with connect(lake, read_only=True) as con:
        con.register("__assembled", pa.table({"trace_id": pa.array(assembled, pa.string())}))
        failed = con.sql(
            "SELECT * EXCLUDE (_written_at) FROM ingest_errors "
            f"WHERE {equals('status', 'failed', table='ingest_errors')} AND {equals('stage', 'assemble', table='ingest_errors')} "
            "AND trace_id IN (SELECT trace_id FROM __assembled)"
        ).to_arrow_table()
    if failed.num_rows:
        resolved = failed.set_column(
            failed.schema.get_field_index("status"), "status", pa.array(["resolved"] * failed.num_rows)
        )
        write(lake, INGEST_ERRORS.name, resolved)


def assemble_traces(
    lake: LakeLike, trace_ids: Iterable[str], *, workers: int = 1, chunk_rows: int = CHUNK_ROWS
) -> AssembleResult:
    """(Re)assemble `trace_ids` from every one of their spans in the lake and write the results."""
    return write_chunks(lake, spans_of_traces(lake, trace_ids, chunk_rows=chunk_rows), workers=workers)


def rebuild(
    lake: LakeLike,
    *,
    since: date | None = None,
    trace_ids: Iterable[str] | None = None,
    workers: int = 1,
    chunk_rows: int = CHUNK_ROWS,
    progress: Callable[[int], None] | None = None,
) -> AssembleResult:
    """(Re)build trajectories and rewards from the `spans` table, deterministically.

    Every trace (or those of `trace_ids`, or those with a span on or after `since`) is
    assembled from all its spans; `progress` is called with the traces done so far.
    """
    chunks = spans_of_traces(lake, trace_ids, since=since, chunk_rows=chunk_rows)
    return write_chunks(lake, chunks, workers=workers, progress=progress)


def pending_trace_ids(lake: LakeLike, *, written_within: timedelta | None = None) -> list[str]:
    """Traces with spans newer than their trajectories (or none yet): what assembly has to (re)do.

    `written_within` looks only at spans written in that span of time before the newest
    span (row groups outside it are skipped by their statistics): what a collector that
    died left unassembled, without reading the whole lake's history on every start.
    """
    lake = Lake.of(lake)
    if not lake.has_table(SPANS.name):
        return []
    recent = ""
    if written_within is not None:
        seconds = int(written_within.total_seconds())
        recent = f"WHERE s.{WRITTEN_AT} >= (SELECT max({WRITTEN_AT}) FROM spans) - INTERVAL {seconds} SECOND"
    with connect(lake, read_only=True) as con:
        rows = con.execute(
            f"""
            SELECT s.trace_id FROM spans s
            LEFT JOIN (SELECT trace_id, max({WRITTEN_AT}) AS assembled_at FROM trajectories
                       WHERE {one_of("source", SPAN_SOURCES, table="trajectories")} GROUP BY trace_id) t USING (trace_id)
            {recent}
            GROUP BY s.trace_id, t.assembled_at
            HAVING t.assembled_at IS NULL OR max(s.{WRITTEN_AT}) > t.assembled_at
            ORDER BY s.trace_id
            """
        ).fetchall()
    return [r[0] for r in rows]
