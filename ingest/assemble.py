"""Assemble raw spans into trajectories (one per agent run) and feedback into rewards.

`assemble(spans)` is a pure, deterministic function of a `spans` table: the same spans
give the same trajectory ids and the same rows, whether they arrive through the
collector, the in-process exporter, the Langfuse puller or `trajlake assemble`.

Agent runs. A trace is one run unless it holds several agent runs: agent spans are
`invoke_agent` (GenAI), `AGENT` (OpenInference), `agent` (Langfuse, OpenLLMetry). An
agent span nested in another agent's subtree is its own run (`<trace_id>:<span_id>`,
metadata names its parent run); when a trace has two or more top-level agent spans,
each is its own run and calls outside every agent stay with the trace-level run
(`trajectory_id = trace_id`). A lone top-level agent is the trace's run.

Feedback. `gen_ai.evaluation.result` events (span events or log records) and
OpenInference `annotation.*` attributes become `rewards` rows of the run that holds
the evaluated span.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa

from ingest.conversation import build_conversation, final_output
from ingest.normalize import LLMCall, Span, ToolCall, normalize_span
from ingest.normalize.genai import tool_definitions
from ingest.normalize.types import first, maybe_json
from store.schema import LOG_KIND, PARTITION_COLUMN, REWARDS, TRAJECTORIES, WRITTEN_AT

EVALUATION_EVENT = "gen_ai.evaluation.result"
SESSION_KEYS = (
    "langfuse.session.id",
    "session.id",
    "gen_ai.conversation.id",
    "traceloop.association.properties.session_id",
    "langfuse.observation.metadata.langfuse_session_id",
)
USER_KEYS = ("langfuse.user.id", "user.id", "traceloop.association.properties.user_id", "enduser.id")
AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "traceloop.entity.name", "graph.node.name")
TRACE_NAME_KEYS = ("langfuse.trace.name", "traceloop.workflow.name", "gen_ai.workflow.name")


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


def is_agent_span(attrs: dict[str, Any]) -> bool:
    return (
        attrs.get("gen_ai.operation.name") == "invoke_agent"
        or str(attrs.get("openinference.span.kind", "")).upper() == "AGENT"
        or attrs.get("langfuse.observation.type") == "agent"
        or attrs.get("traceloop.span.kind") == "agent"
    )


def _order(span: Span) -> tuple[Any, ...]:
    return (
        span.get("start_time") or datetime.min.replace(tzinfo=UTC),
        span.get("end_time") or datetime.min.replace(tzinfo=UTC),
        span["span_id"],
    )


@dataclass
class _Run:
    trajectory_id: str
    agent_span: Span | None
    parent_id: str | None
    spans: list[Span] = field(default_factory=list)
    calls: list[LLMCall | ToolCall] = field(default_factory=list)


def _attach_logs(spans: list[Span]) -> tuple[list[Span], list[Span]]:
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
    return exact if isinstance(exact, int) else _ns(log.get("start_time"))


def _ns(value: datetime | None) -> int:
    return int(value.timestamp() * 1_000_000) * 1000 if value else 0


def _runs(trace_id: str, spans: list[Span]) -> tuple[list[_Run], dict[str, _Run]]:
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
    agents = sorted((by_id[a] for a in set(agent_of.values()) if a), key=_order)
    parent_agent = {a["span_id"]: nearest_agent(a.get("parent_span_id")) for a in agents}
    top = [a for a in agents if parent_agent[a["span_id"]] is None]
    trace_run = _Run(trace_id, top[0] if len(top) == 1 else None, None)
    runs: dict[str | None, _Run] = {None: trace_run}
    if len(top) == 1:
        runs[top[0]["span_id"]] = trace_run
    for agent in agents:
        if agent["span_id"] in runs:
            continue
        parent = runs.get(parent_agent[agent["span_id"]], trace_run)
        runs[agent["span_id"]] = _Run(f"{trace_id}:{agent['span_id']}", agent, parent.trajectory_id)
    run_of_span: dict[str, _Run] = {}
    for span in sorted(spans, key=_order):
        run = runs[agent_of.get(span["span_id"])]
        run.spans.append(span)
        run_of_span[span["span_id"]] = run
    ordered = sorted({id(r): r for r in runs.values()}.values(), key=lambda r: r.trajectory_id)
    return ordered, run_of_span


def _tools(calls: Sequence[LLMCall | ToolCall], spans: list[Span]) -> list[dict[str, Any]]:
    """Tool definitions from the chat calls, then from agent/workflow spans that declare them."""
    tools: dict[str, dict[str, Any]] = {}
    for call in calls:
        if isinstance(call, LLMCall):
            for tool in call.tools:
                tools.setdefault(tool["function"]["name"], tool)
    for span in spans:
        for tool in tool_definitions(span["attributes"]):
            tools.setdefault(tool["function"]["name"], tool)
    return list(tools.values())


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _agent_name(run: _Run, trace_spans: list[Span]) -> str | None:
    if run.agent_span is not None:
        attrs = run.agent_span["attributes"]
        name = first(attrs, *AGENT_NAME_KEYS)
        if name is None:
            span_name = str(run.agent_span.get("name") or "")
            name = span_name.split(" ", 1)[1] if span_name.startswith("invoke_agent ") else span_name or None
        return str(name) if name is not None else None
    for span in trace_spans:
        name = first(span["attributes"], *TRACE_NAME_KEYS, "gen_ai.agent.name")
        if name is not None:
            return str(name)
    roots = [s for s in trace_spans if not s.get("parent_span_id")]
    return (roots[0].get("service_name") or roots[0].get("name")) if roots else None


def _lookup(spans: list[Span], keys: tuple[str, ...]) -> str | None:
    for span in spans:
        value = first(span["attributes"], *keys)
        if value is not None:
            return str(value)
    return None


def _trajectory(run: _Run, trace_spans: list[Span], has_root: bool) -> dict[str, Any] | None:
    llm_calls = [c for c in run.calls if isinstance(c, LLMCall)]
    if not llm_calls:
        return None
    tool_calls = [c for c in run.calls if isinstance(c, ToolCall)]
    messages = build_conversation(run.calls)
    last = llm_calls[-1]
    starts = [s["start_time"] for s in run.spans if s.get("start_time")]
    ends = [s["end_time"] for s in run.spans if s.get("end_time")]
    errored = any(c.error for c in llm_calls) or (
        run.agent_span is not None and run.agent_span.get("status_code") == "ERROR"
    )
    sources = sorted({str(s.get("source") or "otel") for s in run.spans})
    metadata = {
        "llm_calls": len(llm_calls),
        "tool_calls": len(tool_calls),
        "span_count": len(run.spans),
        "conventions": sorted({c.convention for c in run.calls}),
        "provider": last.provider,
        "params": last.params,
        "finish_reasons": last.finish_reasons,
        "response_ids": [c.response_id for c in llm_calls if c.response_id],
        "service_name": next((s.get("service_name") for s in run.spans if s.get("service_name")), None),
        "parent_trajectory_id": run.parent_id,
        "agent_span_id": run.agent_span["span_id"] if run.agent_span else None,
    }
    started = min(starts)
    return {
        "trajectory_id": run.trajectory_id,
        "source": "langfuse" if sources == ["langfuse"] else "otel",
        "trace_id": trace_spans[0]["trace_id"],
        "session_id": _lookup(run.spans, SESSION_KEYS) or _lookup(trace_spans, SESSION_KEYS),
        "user_id": _lookup(run.spans, USER_KEYS) or _lookup(trace_spans, USER_KEYS),
        "agent_name": _agent_name(run, trace_spans),
        "model": last.model,
        "started_at": started,
        "ended_at": max(ends) if ends else None,
        "messages": messages,
        "tools": json.dumps(_tools(llm_calls, run.spans), sort_keys=True),
        "final_output": final_output(messages),
        "input_tokens": _sum([c.input_tokens for c in llm_calls]),
        "output_tokens": _sum([c.output_tokens for c in llm_calls]),
        "scenario_id": None,
        "group_id": None,
        "policy": last.model,
        "turns": [],
        "metadata": json.dumps(metadata, sort_keys=True, default=str),
        "has_content": any(c.has_content for c in llm_calls),
        "status": "error" if errored else ("ok" if has_root else "truncated"),
        WRITTEN_AT: None,
        PARTITION_COLUMN: started.date(),
    }


def _feedback(span: Span, run_id: str) -> list[dict[str, Any]]:
    rows = []
    for event in span.get("events") or []:
        if event.get("name") != EVALUATION_EVENT:
            continue
        attrs = dict(event.get("attributes") or {})
        body = maybe_json(attrs.get("log.body"))
        if isinstance(body, dict):
            attrs = {**body, **attrs}
        rows.append(
            _reward(
                run_id,
                attrs.get("gen_ai.evaluation.name"),
                "otel:gen_ai.evaluation.result",
                attrs.get("gen_ai.evaluation.score.value"),
                attrs.get("gen_ai.evaluation.explanation"),
                event.get("time"),
                label=attrs.get("gen_ai.evaluation.score.label"),
                span_id=span["span_id"],
            )
        )
    attrs = span["attributes"]
    if "annotation.name" in attrs:
        rows.append(
            _reward(
                run_id,
                attrs.get("annotation.name"),
                "openinference:annotation",
                attrs.get("annotation.score"),
                attrs.get("annotation.explanation"),
                _ns(span.get("end_time") or span.get("start_time")),
                label=attrs.get("annotation.label"),
                span_id=span["span_id"],
            )
        )
    return rows


def _reward(
    run_id: str,
    name: Any,
    scorer: str,
    value: Any,
    explanation: Any,
    time_ns: Any,
    *,
    label: Any,
    span_id: str,
) -> dict[str, Any]:
    try:
        number = None if value is None else float(value)
    except (TypeError, ValueError):  # a label-only evaluation: no number, the label is in metadata
        number = None
    if number is not None and not math.isfinite(number):  # NaN/inf: no usable number (raw_value keeps it)
        number = None
    scored_at = datetime.fromtimestamp((int(time_ns or 0)) / 1e9, tz=UTC)
    return {
        "trajectory_id": run_id,
        "name": str(name or "feedback"),
        "scorer": scorer,
        "value": number,
        "explanation": None if explanation is None else str(explanation),
        "group_id": None,
        "scored_at": scored_at,
        "run_id": None,
        "status": "ok",
        "error": None,
        "metadata": json.dumps(
            {"label": label, "span_id": span_id, "raw_value": value}, sort_keys=True, default=str
        ),
        WRITTEN_AT: None,
        PARTITION_COLUMN: scored_at.date(),
    }


def assemble_trace(trace_id: str, spans: list[Span]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Trajectory and reward rows of one trace (spans as `span_dicts` gives them)."""
    real, orphans = _attach_logs(spans)
    if not real:
        return [], []
    runs, run_of_span = _runs(trace_id, real)
    for run in runs:
        for span in run.spans:
            call = normalize_span(span)
            if call is not None:
                run.calls.append(call)
    # Without its root span the trace is still in flight (assembled on the idle timeout).
    has_root = any(not s.get("parent_span_id") for s in real)
    trajectories = [t for t in (_trajectory(run, sorted(real, key=_order), has_root) for run in runs) if t]
    emitted = {t["trajectory_id"] for t in trajectories}
    rewards = []
    for span in sorted([*real, *orphans], key=_order):
        owner = run_of_span.get(span["span_id"]) or run_of_span.get(span.get("parent_span_id") or "")
        run_id = owner.trajectory_id if owner is not None and owner.trajectory_id in emitted else trace_id
        rewards.extend(_feedback(span, run_id))
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
