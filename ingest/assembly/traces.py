"""Assemble raw spans into trajectories (one per agent run) and feedback into rewards.

`assemble(spans)` is a pure, deterministic function of a `spans` table: the same spans
give the same trajectory ids and the same rows, whether they arrive through the
collector, the in-process exporter, the Langfuse puller or `trajlake assemble`. Which
spans form which run is `ingest.assembly.runs`; a run's row is
`ingest.assembly.trajectory`; feedback is `ingest.assembly.feedback`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from ingest.assembly.feedback import feedback_rows
from ingest.assembly.normalize import Span, normalize_span
from ingest.assembly.runs import agent_runs, attach_logs, span_order
from ingest.assembly.trajectory import trajectory_row
from store.schema import REWARDS, TRAJECTORIES, WRITTEN_AT


@dataclass
class Assembled:
    """Rows ready for the lake: one trajectory per agent run, one reward per piece of feedback."""

    trajectories: pa.Table
    rewards: pa.Table
    traces: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason code -> traces without a trajectory


def span_dicts(spans: pa.Table) -> list[Span]:
    """Rows of a `spans` table as dicts with parsed `attributes`/`events`, newest row per key."""
    rows = spans.to_pylist()
    newest: dict[tuple[str, str], Span] = {}
    for row in rows:
        key = (row["trace_id"], row["span_id"])
        old = newest.get(key)
        if old is not None and (row.get(WRITTEN_AT) or 0) < (old.get(WRITTEN_AT) or 0):
            continue
        newest[key] = row
    out = []
    for row in newest.values():
        row = dict(row)
        row["attributes"] = _loads(row.get("attributes"), {})
        row["events"] = _loads(row.get("events"), [])
        out.append(row)
    return out


def _loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return default
    return value if isinstance(value, type(default)) else default


def assemble_trace(trace_id: str, spans: list[Span]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Trajectory and reward rows of one trace (spans as `span_dicts` gives them)."""
    real, orphans = attach_logs(spans)
    if not real:
        return [], []
    runs, run_of_span = agent_runs(trace_id, real)
    for run in runs:
        for span in run.spans:
            call = normalize_span(span)
            if call is not None:
                run.calls.append(call)
    # Without its root span the trace is still in flight (assembled on the idle timeout).
    has_root = any(not s.get("parent_span_id") for s in real)
    trajectories = [
        t for t in (trajectory_row(run, sorted(real, key=span_order), has_root) for run in runs) if t
    ]
    emitted = {t["trajectory_id"] for t in trajectories}
    rewards = []
    for span in sorted([*real, *orphans], key=span_order):
        owner = run_of_span.get(span["span_id"]) or run_of_span.get(span.get("parent_span_id") or "")
        run_id = owner.trajectory_id if owner is not None and owner.trajectory_id in emitted else trace_id
        rewards.extend(feedback_rows(span, run_id))
    return trajectories, rewards


def assemble(spans: pa.Table) -> Assembled:
    """Trajectories and rewards for every trace in a `spans` table (deterministic).

    >>> assemble(store.empty_table("spans")).trajectories.num_rows  # doctest: +SKIP
    0
    """
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in span_dicts(spans):
        by_trace[span["trace_id"]].append(span)
    trajectories: list[dict[str, Any]] = []
    rewards: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for trace_id in sorted(by_trace):
        found, feedback = assemble_trace(trace_id, by_trace[trace_id])
        if not found:
            skipped["no_llm_calls"] = skipped.get("no_llm_calls", 0) + 1
        trajectories.extend(found)
        rewards.extend(feedback)
    return Assembled(
        trajectories=pa.Table.from_pylist(trajectories, schema=TRAJECTORIES.schema),
        rewards=pa.Table.from_pylist(rewards, schema=REWARDS.schema),
        traces=len(by_trace),
        skipped=skipped,
    )
