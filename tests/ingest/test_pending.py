"""Which traces are ready to assemble, and reading only the lake files that can hold them."""

from __future__ import annotations

import time

import pyarrow as pa

import store
from ingest.lakeio import read_trace_spans
from ingest.pending import PendingTraces
from tests.ingest.test_assemble import agent, chat, spans_table, text


def rows(trace: str, *, root: bool) -> pa.Table:
    spans = [{**chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1), "trace_id": trace}]
    if root:
        spans.append({**agent("a" * 16, None, "bot", 0), "trace_id": trace})
    return spans_table(spans)


def test_root_makes_a_trace_ready_idle_timeout_catches_the_rest_and_late_spans_come_back() -> None:
    pending = PendingTraces(idle_timeout_s=10)
    pending.observe(rows("1" * 32, root=True), now=0)
    pending.observe(rows("2" * 32, root=False), now=0)
    first = pending.take_ready(now=1)
    assert first.trace_ids == ["1" * 32] and first.first_start_ns is not None
    assert not pending.take_ready(now=5)  # the root-less trace waits for its idle timeout
    assert pending.take_ready(now=11).trace_ids == ["2" * 32]
    pending.observe(rows("1" * 32, root=False), now=12)  # a late span of an assembled trace
    late = pending.take_ready(now=12)
    assert late.trace_ids == ["1" * 32] and late.first_start_ns == first.first_start_ns
    assert len(pending) == 0


def test_read_trace_spans_skips_files_committed_before_the_bound(lake: store.Lake) -> None:
    store.write(lake, "spans", rows("1" * 32, root=True))
    bound = time.time_ns()
    store.write(lake, "spans", rows("2" * 32, root=True))
    both = read_trace_spans(lake, ["1" * 32, "2" * 32])
    recent = read_trace_spans(lake, ["1" * 32, "2" * 32], written_after_ns=bound)
    assert set(both.column("trace_id").to_pylist()) == {"1" * 32, "2" * 32}
    assert set(recent.column("trace_id").to_pylist()) == {"2" * 32}


def test_over_capacity_the_oldest_traces_are_forced_out() -> None:
    pending = PendingTraces(idle_timeout_s=1000, max_tracked=2)
    for n in range(4):
        pending.observe(rows(f"{n:032x}", root=False), now=n)
    assert pending.take_ready(now=5).trace_ids == [f"{0:032x}", f"{1:032x}"]
    assert len(pending) == 2
