"""Which traces are ready to assemble, and reading every span of them back, whenever it was written."""

from __future__ import annotations

import pyarrow as pa

from ingest.lakeio import spans_of_traces
from ingest.pending import PendingTraces
from store.lake import Lake
from store.writer import write
from tests.ingest.span_rows import agent, chat, spans_table, text


def rows(trace: str, *, root: bool) -> pa.Table:
    spans = [{**chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1), "trace_id": trace}]
    if root:
        spans.append({**agent("a" * 16, None, "bot", 0), "trace_id": trace})
    return spans_table(spans)


def test_root_makes_a_trace_ready_idle_timeout_catches_the_rest_and_late_spans_come_back() -> None:
    pending = PendingTraces(idle_timeout_s=10)
    pending.observe(rows("1" * 32, root=True), now=0)
    pending.observe(rows("2" * 32, root=False), now=0)
    assert pending.take_ready(now=1) == ["1" * 32]
    assert not pending.take_ready(now=5)  # the root-less trace waits for its idle timeout
    assert pending.take_ready(now=11) == ["2" * 32]
    pending.observe(rows("1" * 32, root=False), now=12)  # a late span of an assembled trace
    assert pending.take_ready(now=12) == ["1" * 32]  # ready again at once
    assert len(pending) == 0


def test_spans_of_traces_reads_every_span_of_the_asked_traces_whole(lake: Lake) -> None:
    write(lake, "spans", rows("1" * 32, root=True))
    write(lake, "spans", rows("2" * 32, root=True))
    write(lake, "spans", rows("1" * 32, root=False))  # a late copy of one span: one row per span
    chunks = list(spans_of_traces(lake, ["1" * 32], chunk_rows=1))
    assert [c.num_rows for c in chunks] == [2]  # a chunk never splits a trace
    assert set(chunks[0].column("trace_id").to_pylist()) == {"1" * 32}
    assert len(list(spans_of_traces(lake, None, chunk_rows=1))) == 2


def test_over_capacity_the_oldest_traces_are_forced_out() -> None:
    pending = PendingTraces(idle_timeout_s=1000, max_tracked=2)
    for n in range(4):
        pending.observe(rows(f"{n:032x}", root=False), now=n)
    assert pending.take_ready(now=5) == [f"{0:032x}", f"{1:032x}"]
    assert len(pending) == 2
