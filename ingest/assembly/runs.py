"""Agent runs: which spans of a trace make up which agent run (one trajectory each).

A trace is one run unless it holds several agent runs: agent spans are `invoke_agent`
(GenAI), `AGENT` (OpenInference), `agent` (Langfuse, OpenLLMetry). An agent span nested in
another agent's subtree is its own run (`<trace_id>:<span_id>`, metadata names its parent
run); when a trace has two or more top-level agent spans, each is its own run and calls
outside every agent stay with the trace-level run (`trajectory_id = trace_id`). A lone
top-level agent is the trace's run. Log records (GenAI events sent on `/v1/logs`) are
folded into the span they describe first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ingest.assembly.normalize import LLMCall, Span, ToolCall
from store.schema import LOG_KIND


def is_agent_span(attrs: dict[str, Any]) -> bool:
    return (
        attrs.get("gen_ai.operation.name") == "invoke_agent"
        or str(attrs.get("openinference.span.kind", "")).upper() == "AGENT"
        or attrs.get("langfuse.observation.type") == "agent"
        or attrs.get("traceloop.span.kind") == "agent"
    )


def span_order(span: Span) -> tuple[Any, ...]:
    return (
        span.get("start_time") or datetime.min.replace(tzinfo=UTC),
        span.get("end_time") or datetime.min.replace(tzinfo=UTC),
        span["span_id"],
    )


@dataclass
class Run:
    trajectory_id: str
    agent_span: Span | None
    parent_id: str | None
    spans: list[Span] = field(default_factory=list)
    calls: list[LLMCall | ToolCall] = field(default_factory=list)


def attach_logs(spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """Fold LOG rows into their span's events; return (real spans, orphan logs)."""
    by_id = {s["span_id"]: s for s in spans if s.get("kind") != LOG_KIND}
    orphans = []
    logs = [s for s in spans if s.get("kind") == LOG_KIND]
    for log in sorted(logs, key=lambda s: (_log_time(s), s["span_id"])):
        event = {"name": log.get("name"), "time": _log_time(log), "attributes": log["attributes"]}
        parent = by_id.get(log.get("parent_span_id") or "")
        if parent is not None:
            parent["events"] = [*parent["events"], event]
        else:
            orphans.append({**log, "events": [event]})
    return list(by_id.values()), orphans


def _log_time(log: Span) -> int:
    exact = log["attributes"].get("log.time_unix_nano")
    return exact if isinstance(exact, int) else to_ns(log.get("start_time"))


def to_ns(value: datetime | None) -> int:
    return int(value.timestamp() * 1_000_000) * 1000 if value else 0


def agent_runs(trace_id: str, spans: list[Span]) -> tuple[list[Run], dict[str, Run]]:
    by_id = {s["span_id"]: s for s in spans}
    agent_of: dict[str, str | None] = {}

    def nearest_agent(span_id: str | None, seen: int = 0) -> str | None:
        # Nearest agent ancestor (inclusive), memoised; `seen` guards against parent cycles.
        if span_id is None or span_id not in by_id or seen > len(by_id):
            return None
        if span_id in agent_of:
            return agent_of[span_id]
        span = by_id[span_id]
        found = (
            span_id
            if is_agent_span(span["attributes"])
            else nearest_agent(span.get("parent_span_id"), seen + 1)
        )
        agent_of[span_id] = found
        return found

    for span_id in by_id:
        nearest_agent(span_id)
    agents = sorted((by_id[a] for a in set(agent_of.values()) if a), key=span_order)
    parent_agent = {a["span_id"]: nearest_agent(a.get("parent_span_id")) for a in agents}
    top = [a for a in agents if parent_agent[a["span_id"]] is None]
    trace_run = Run(trace_id, top[0] if len(top) == 1 else None, None)
    runs: dict[str | None, Run] = {None: trace_run}
    if len(top) == 1:
        runs[top[0]["span_id"]] = trace_run
    for agent in agents:
        if agent["span_id"] in runs:
            continue
        parent = runs.get(parent_agent[agent["span_id"]], trace_run)
        runs[agent["span_id"]] = Run(f"{trace_id}:{agent['span_id']}", agent, parent.trajectory_id)
    run_of_span: dict[str, Run] = {}
    for span in sorted(spans, key=span_order):
        run = runs[agent_of.get(span["span_id"])]
        run.spans.append(span)
        run_of_span[span["span_id"]] = run
    ordered = sorted({id(r): r for r in runs.values()}.values(), key=lambda r: r.trajectory_id)
    return ordered, run_of_span
