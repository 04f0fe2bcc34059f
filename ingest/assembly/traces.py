"""Assemble raw spans into trajectories (one per agent run) and feedback into rewards.

`assemble(spans)` is a pure, deterministic function of a `spans` table: the same spans
give the same trajectory ids and the same rows, whether they arrive through the
collector, the in-process exporter, the Langfuse puller or `trajlake assemble`. Which
spans form which run is `ingest.assembly.runs`; a run's row is
`ingest.assembly.trajectory`; feedback is `ingest.assembly.feedback`.
"""

from __future__ import annotations

import contextlib
import gc
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.assembly.feedback import feedback_rows, label_rows
from ingest.assembly.normalize import HistoryMemo, Span, normalize_span
from ingest.assembly.rows import parse_json, raw_rows_by_trace
from ingest.assembly.runs import agent_runs, attach_logs, span_order
from ingest.assembly.trajectory import trajectory_row
from store.schema import INGEST_ERRORS, LABELS, REWARDS, TRAJECTORIES, WRITTEN_AT
from store.vocabulary import IngestStage


@dataclass
class Assembled:
    """Rows ready for the lake: one trajectory per agent run, one reward per piece of feedback."""

    trajectories: pa.Table
    rewards: pa.Table
    traces: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason code -> traces without a trajectory
    # Traces whose assembly raised: `ingest_errors` rows (their spans stay in `spans`).
    failures: pa.Table = field(default_factory=INGEST_ERRORS.schema.empty_table)
    assembled_ids: list[str] = field(default_factory=list)  # traces that went through
    # Feedback that said what the right answer was (`trajlake.label.expected`).
    labels: pa.Table = field(default_factory=LABELS.schema.empty_table)

    @property
    def failed(self) -> int:
        return self.failures.num_rows


def assemble_trace(trace_id: str, spans: list[Span]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Trajectory and reward rows of one trace (spans as `span_dicts` gives them)."""
    trajectories, rewards, _ = assemble_trace_labels(trace_id, spans)
    return trajectories, rewards


def assemble_trace_labels(
    trace_id: str, spans: list[Span]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Trajectory, reward and label rows of one trace."""
    real, orphans = attach_logs(spans)
    if not real:
        return [], [], []
    real.sort(key=span_order)
    memo = HistoryMemo()
    calls = {s["span_id"]: c for s in real if (c := normalize_span(s, memo)) is not None}
    runs, run_of_span = agent_runs(trace_id, real, calls)
    # Without its root span the trace is still in flight (assembled on the idle timeout).
    has_root = any(not s.get("parent_span_id") for s in real)
    trajectories = [t for t in (trajectory_row(run, real, has_root) for run in runs) if t]
    emitted = {t["trajectory_id"]: t.get("user_id") for t in trajectories}
    rewards, labels = [], []
    for span in sorted([*real, *orphans], key=span_order) if orphans else real:
        if not span.get("events") and "annotation.name" not in span["attributes"]:
            continue  # nothing to score: no events, no annotation
        owner = run_of_span.get(span["span_id"]) or run_of_span.get(span.get("parent_span_id") or "")
        run_id = owner.trajectory_id if owner is not None and owner.trajectory_id in emitted else trace_id
        rewards.extend(feedback_rows(span, run_id))
        labels.extend(label_rows(span, run_id, emitted.get(run_id)))
    return trajectories, rewards, labels


def assemble(spans: pa.Table) -> Assembled:
    """Trajectories and rewards for every trace in a `spans` table (deterministic).

    A trace whose assembly raises (a shape no normaliser expected) is a failure row of its
    own, never a failure of the batch: the other traces still assemble.

    >>> assemble(store.schema.empty_table("spans")).trajectories.num_rows  # doctest: +SKIP
    0
    """
    with _collections_paused():
        return _assemble(spans)


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    """Assembly allocates millions of small, acyclic objects (parsed JSON): the cyclic garbage
    collector would walk all of them again and again for nothing (a sixth of the time). Paused
    here, and it collects once at the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _assemble(spans: pa.Table) -> Assembled:
    by_trace = raw_rows_by_trace(spans)
    traces = len(by_trace)
    per_trace: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    labels: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for trace_id in sorted(by_trace):
        # Each trace's JSON is parsed just before it is assembled, and its spans freed right after:
        # its parsed strings are still in the CPU cache when the normalisers read them.
        trace = parse_json(by_trace.pop(trace_id).values())
        try:
            found, feedback, labelled = assemble_trace_labels(trace_id, trace)
        except Exception as exc:  # isolated: recorded with its reason, the batch goes on
            failures.append(failure_row(trace_id, "assemble", exc, len(trace)))
            continue
        if not found:
            skipped["no_llm_calls"] = skipped.get("no_llm_calls", 0) + 1
        per_trace[trace_id] = (found, feedback)
        labels.extend(labelled)
    trajectories, rewards = _tables(per_trace, failures)
    kept = set(per_trace)  # a trace that failed to fit the schema keeps no label either
    return Assembled(
        trajectories=trajectories,
        rewards=rewards,
        traces=traces,
        skipped=skipped,
        failures=pa.Table.from_pylist(failures, schema=INGEST_ERRORS.schema),
        assembled_ids=sorted(per_trace),
        labels=pa.Table.from_pylist([r for r in labels if r["trace_id"] in kept], LABELS.schema),
    )


def _tables(
    per_trace: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], failures: list[dict[str, Any]]
) -> tuple[pa.Table, pa.Table]:
    """The rows as Arrow tables; when a trace's rows do not fit the schema, that trace is a failure."""
    try:
        return (
            pa.Table.from_pylist([t for found, _ in per_trace.values() for t in found], TRAJECTORIES.schema),
            pa.Table.from_pylist([r for _, feedback in per_trace.values() for r in feedback], REWARDS.schema),
        )
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass  # find the trace(s) at fault, one by one
    trajectories, rewards = [], []
    for trace_id in list(per_trace):
        found, feedback = per_trace[trace_id]
        try:
            trajectories.append(pa.Table.from_pylist(found, TRAJECTORIES.schema))
            rewards.append(pa.Table.from_pylist(feedback, REWARDS.schema))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            failures.append(failure_row(trace_id, "assemble", exc, None))
            del per_trace[trace_id]
    return (
        pa.concat_tables([TRAJECTORIES.schema.empty_table(), *trajectories]),
        pa.concat_tables([REWARDS.schema.empty_table(), *rewards]),
    )


def reason_code(exc: BaseException) -> str:
    """A short snake_case code for an unexpected error, from its class (`TypeError` -> `type_error`).

    >>> reason_code(KeyError("x")), reason_code(ValueError()), reason_code(OverflowError())
    ('key_error', 'value_error', 'overflow_error')
    """
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(exc).__name__).lower()


def failure_row(
    trace_id: str, stage: IngestStage, exc: BaseException, span_count: int | None
) -> dict[str, Any]:
    """An `ingest_errors` row: a short reason code, then the message and where in our code, and when."""
    # The innermost Python frames: an error raised inside a compiled library (pyarrow's `.pyx`)
    # is located where our code called it, not only in the library's internals.
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every if f.filename.endswith(".py")][-3:] or every[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    message = " ".join(str(exc).split())[:500]
    return {
        "trace_id": trace_id,
        "stage": stage,
        "status": "failed",
        "reason": reason_code(exc),
        "error_class": type(exc).__name__,
        "detail": "; at ".join(part for part in (message, where) if part) or None,
        "span_count": span_count,
        "occurred_at": datetime.now(UTC),
        WRITTEN_AT: None,
    }
