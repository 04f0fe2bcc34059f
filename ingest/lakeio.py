"""The lake edge of assembly: read a few traces' spans, write trajectories and rewards, rebuild everything.

`assemble` itself is pure; this module does the I/O around it. Reading the spans of a
handful of traces uses a pyarrow dataset over the `spans` table with the `dt`
partitions the traces touch, so a collector assembling today's traces reads today's
files only. `rebuild` streams the whole table ordered by trace id through DuckDB and
assembles trace by trace, so memory is bounded by the largest trace, not the lake.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

import store
from ingest.assemble import Assembled, assemble
from store.schema import PARTITION_COLUMN, REWARDS, SPANS, TRAJECTORIES

LakeLike = store.Lake | str | os.PathLike[str]


@dataclass
class AssembleResult:
    """What one assembly pass wrote."""

    traces: int = 0
    trajectories: int = 0
    rewards: int = 0
    files: int = 0


def _written_before(path: str, bound_ns: int) -> bool:
    """Whether a `part-<time_ns>-…` file was committed before `bound_ns` (other names: unknown, kept)."""
    name = path.rsplit("/", 1)[-1]
    if not name.startswith("part-"):
        return False
    stamp = name[5:].split("-", 1)[0]
    return stamp.isdigit() and int(stamp) < bound_ns


def read_trace_spans(
    lake: LakeLike,
    trace_ids: Iterable[str],
    dts: Iterable[date] | None = None,
    *,
    written_after_ns: int | None = None,
) -> pa.Table:
    """Every stored row of the given traces (duplicates included; `assemble` keeps the newest).

    `dts` limits the read to those `dt` partitions; `written_after_ns` skips `part-` files
    committed before that time (a span is only written after it started, so the collector
    passes the traces' earliest start minus a clock-skew margin): assembling the traces
    that just completed reads the last minutes' files, not the whole day.
    """
    lake = store.Lake.of(lake)
    ids = sorted(set(trace_ids))
    files = lake.data_files("spans")
    days = sorted(set(dts or ()))
    if days:
        wanted = {f"/{PARTITION_COLUMN}={day.isoformat()}/" for day in days}
        files = [f for f in files if any(w in f for w in wanted)]
    if written_after_ns is not None:
        files = [f for f in files if not _written_before(f, written_after_ns)]
    if not ids or not files:
        return SPANS.schema.empty_table()
    dataset = ds.dataset(
        files,
        schema=SPANS.schema,
        format="parquet",
        filesystem=lake.arrow_fs,
        partitioning=ds.partitioning(pa.schema([(PARTITION_COLUMN, pa.date32())]), flavor="hive"),
        partition_base_dir=lake.table_dir("spans"),
    )
    return dataset.to_table(filter=pc.field("trace_id").isin(ids))


def write_assembled(lake: LakeLike, assembled: Assembled) -> AssembleResult:
    """Write trajectories and rewards (durably); a newer row supersedes an older one by key."""
    result = AssembleResult(traces=assembled.traces)
    if assembled.trajectories.num_rows:
        written = store.write(lake, TRAJECTORIES.name, assembled.trajectories)
        result.trajectories, result.files = written.rows, result.files + len(written.files)
    if assembled.rewards.num_rows:
        written = store.write(lake, REWARDS.name, assembled.rewards)
        result.rewards, result.files = written.rows, result.files + len(written.files)
    return result


def assemble_traces(
    lake: LakeLike,
    trace_ids: Iterable[str],
    dts: Iterable[date] | None = None,
    *,
    written_after_ns: int | None = None,
) -> AssembleResult:
    """Read the given traces from the lake, assemble them, write the results."""
    spans = read_trace_spans(lake, trace_ids, dts, written_after_ns=written_after_ns)
    return write_assembled(lake, assemble(spans))


def rebuild(
    lake: LakeLike,
    *,
    since: date | None = None,
    trace_ids: Iterable[str] | None = None,
    batch_traces: int = 500,
    progress: Callable[[int], None] | None = None,
) -> AssembleResult:
    """(Re)build trajectories and rewards from the `spans` table, deterministically.

    Streams spans ordered by trace id and assembles `batch_traces` traces at a time.
    `since` limits the rebuild to traces with spans in `dt` partitions on or after that
    date (each read whole, earlier partitions included);
    `progress` is called with the number of traces done after each batch.
    """
    lake = store.Lake.of(lake)
    total = AssembleResult()
    if not lake.data_files("spans"):
        return total
    con = store.connect(lake, read_only=False)
    where = []
    params: list[object] = []
    if since is not None:
        # Whole traces with a span on or after `since`: a trace that crosses midnight has
        # spans in two partitions, and one rebuilt from the later ones alone would
        # supersede its complete trajectory with a partial one.
        where.append(f"trace_id IN (SELECT trace_id FROM spans WHERE {PARTITION_COLUMN} >= ?)")
        params.append(since)
    if trace_ids is not None:
        where.append("trace_id IN (SELECT unnest(?))")
        params.append(sorted(set(trace_ids)))
    sql = f"SELECT * FROM spans {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY trace_id, span_id"
    reader = con.sql(sql, params=params or None).to_arrow_reader(50_000)
    pending: list[pa.RecordBatch] = []
    pending_traces: set[str] = set()

    def flush(batches: list[pa.RecordBatch]) -> None:
        if not batches:
            return
        table = pa.Table.from_batches(batches).cast(SPANS.schema) if batches else SPANS.schema.empty_table()
        written = write_assembled(lake, assemble(table))
        total.traces += written.traces
        total.trajectories += written.trajectories
        total.rewards += written.rewards
        total.files += written.files
        if progress is not None:
            progress(total.traces)

    for batch in reader:
        if batch.num_rows == 0:
            continue
        ids = batch.column("trace_id")
        last = ids[-1].as_py()
        pending.append(batch)
        pending_traces.update(pc.unique(ids).to_pylist())
        if len(pending_traces) >= batch_traces:
            # Everything before the batch's last trace is complete (rows are ordered by trace id).
            table = pa.Table.from_batches(pending)
            done = table.filter(pc.not_equal(table.column("trace_id"), last))
            rest = table.filter(pc.equal(table.column("trace_id"), last))
            flush(done.to_batches())
            pending, pending_traces = rest.to_batches(), {last}
    flush(pending)
    con.close()
    return total
