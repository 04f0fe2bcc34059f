"""Agent runs: which spans of a trace make up which agent run (one trajectory each).

Agent spans are `invoke_agent` (GenAI), `AGENT` (OpenInference), `agent` (Langfuse,
OpenLLMetry) and the Vercel AI SDK's `ai.generateText`/`ai.streamText` calls. One agent
run is one trajectory, and the outermost agent span owns its conversation: frameworks nest
agent spans for graph nodes and turns (LangGraph's `agent` node under the graph,
openai-agents' agent under its workflow), and those are the same conversation. A nested
agent is a run of its own (`<trace_id>:<span_id>`) only when it holds its own conversation:
its model calls have a system prompt or model that the enclosing agent's own calls do not
(or, when the enclosing agent makes no calls itself, that its sibling agents do not share).
Its metadata then names the enclosing run that has a trajectory. Two or more top-level
agents are a run each, and calls outside every agent stay with the trace-level run
(`trajectory_id = trace_id`); a lone top-level agent is the trace's run. Log records
(GenAI events sent on `/v1/logs`) are folded into the span they describe first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from ingest.assembly.normalize import LLMCall, Span, ToolCall
from ingest.assembly.normalize.types import text_attr
from store.schema import LOG_KIND

VERCEL_AGENT_OPERATIONS = {"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject"}


_AGENT_MARKERS = frozenset(
    ("openinference.span.kind", "langfuse.observation.type", "traceloop.span.kind", "ai.operationId")
)


def is_agent_span(attrs: dict[str, Any]) -> bool:
    # `invoke_workflow` is what `invoke_agent` was called for workflows before the GenAI
    # conventions merged them (semantic-conventions-genai v0.1.0); ADK still sends it.
    if attrs.get("gen_ai.operation.name") in ("invoke_agent", "invoke_workflow"):
        return True
    if attrs.keys().isdisjoint(_AGENT_MARKERS):  # the usual span: none of the other tests can hold
        return False
    return (
        str(attrs.get("openinference.span.kind", "")).upper() == "AGENT"
        or attrs.get("langfuse.observation.type") == "agent"
        or attrs.get("traceloop.span.kind") == "agent"
        or text_attr(attrs, "ai.operationId") in VERCEL_AGENT_OPERATIONS
    )


def span_order(span: Span) -> tuple[Any, ...]:
    return (span.get("start_time") or 0, span.get("end_time") or 0, span["span_id"])


@dataclass(slots=True, init=False)  # the `__init__` is written out: see `LLMCall`
class Run:
    """One agent run: its spans and normalised calls in time order."""

    trajectory_id: str
    agent_span: Span | None  # the outermost agent span of the run
    parent: Run | None  # the enclosing run, for a nested agent with its own conversation
    agents: list[Span]  # every agent span merged into the run, outermost first
    spans: list[Span]
    calls: list[LLMCall | ToolCall]

    def __init__(
        self,
        trajectory_id: str,
        agent_span: Span | None,
        parent: Run | None = None,
        agents: list[Span] | None = None,
        spans: list[Span] | None = None,
        calls: list[LLMCall | ToolCall] | None = None,
    ) -> None:
        self.trajectory_id, self.agent_span, self.parent = trajectory_id, agent_span, parent
        self.agents = [] if agents is None else agents
        self.spans = [] if spans is None else spans
        self.calls = [] if calls is None else calls

    @property
    def has_llm_calls(self) -> bool:
        return any(isinstance(c, LLMCall) for c in self.calls)

    @property
    def parent_id(self) -> str | None:
        """The nearest enclosing run that has a trajectory (one with model calls)."""
        parent = self.parent
        while parent is not None and not parent.has_llm_calls:
            parent = parent.parent
        return parent.trajectory_id if parent is not None else None


Signature = tuple[str | None, str | None]


def signature(call: LLMCall) -> Signature:
    """What makes a conversation its own: the system prompt and the model."""
    system = next((m.get("content") for m in call.input_messages if m.get("role") == "system"), None)
    return (system, call.model)


def attach_logs(spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """Fold LOG rows into their span's events; return (real spans, orphan logs)."""
    if LOG_KIND not in {s.get("kind") for s in spans}:
        return list(spans), []
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


def to_ns(micros: int | None) -> int:
    """A span time (microseconds since the epoch) in nanoseconds; 0 when unknown."""
    return micros * 1000 if micros else 0


def to_datetime(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def agent_runs(
    trace_id: str, spans: list[Span], calls: dict[str, LLMCall | ToolCall]
) -> tuple[list[Run], dict[str, Run]]:
    """The runs of a trace (see the module docstring) and the run of every span; `spans` in
    time order (`span_order`), `calls` their normalised calls by span id, in the same order."""
    agent_spans = [s for s in spans if is_agent_span(s["attributes"])]
    if len(agent_spans) <= 1:
        return _lone_run(trace_id, spans, calls, agent_spans)
    by_id = {s["span_id"]: s for s in spans}
    agent_ids = {s["span_id"] for s in agent_spans}
    agent_of: dict[str, str | None] = {}
    for span_id, span in by_id.items():
        if span_id in agent_of:  # found on the way up from a span before it
            continue
        # In time order a parent mostly comes before its children: a span that is no agent itself
        # has its known parent's agent (`_nearest_agent`'s first step up, without the walk).
        parent_id = span.get("parent_span_id")
        if parent_id in agent_of and span_id not in agent_ids:
            agent_of[span_id] = agent_of[parent_id]
        else:
            _nearest_agent(span_id, by_id, agent_ids, agent_of)
    agents = sorted((by_id[a] for a in set(agent_of.values()) if a), key=span_order)
    parent_agent = {
        a["span_id"]: _nearest_agent(a.get("parent_span_id"), by_id, agent_ids, agent_of) for a in agents
    }
    for agent_id in list(parent_agent):  # a parent chain that loops (bad ids) starts at the top
        seen = {agent_id}
        ancestor = parent_agent[agent_id]
        while ancestor is not None and ancestor not in seen:
            seen.add(ancestor)
            ancestor = parent_agent.get(ancestor)
        if ancestor is not None:
            parent_agent[agent_id] = None
    children: dict[str | None, list[str]] = {}
    for agent in agents:
        children.setdefault(parent_agent[agent["span_id"]], []).append(agent["span_id"])

    # The model calls of each agent's own spans, and the first call anywhere in its subtree.
    own: dict[str | None, list[LLMCall]] = {}
    for span in spans:  # in time order already
        call = calls.get(span["span_id"])
        if isinstance(call, LLMCall):
            own.setdefault(agent_of.get(span["span_id"]), []).append(call)

    first_call = partial(_first_call, own=own, children=children)

    top = children.get(None, [])
    trace_run = Run(trace_id, by_id[top[0]] if len(top) == 1 else None)
    run_of_agent: dict[str | None, Run] = {None: trace_run}
    if len(top) == 1:
        run_of_agent[top[0]] = trace_run
    pending: list[tuple[str | None, str]] = [(None, child) for child in top]
    while pending:
        parent_id, agent_id = pending.pop(0)
        parent_run = run_of_agent[parent_id]
        if agent_id not in run_of_agent:
            if _own_conversation(agent_id, parent_id, own, children, first_call):
                agent = by_id[agent_id]
                run_of_agent[agent_id] = Run(f"{trace_id}:{agent_id}", agent, parent_run)
            else:
                run_of_agent[agent_id] = parent_run
        run_of_agent[agent_id].agents.append(by_id[agent_id])
        pending.extend((agent_id, child) for child in children.get(agent_id, []))

    run_of_span: dict[str, Run] = {}
    for span in spans:  # in time order already
        run = run_of_agent[agent_of.get(span["span_id"])]
        run.spans.append(span)
        call = calls.get(span["span_id"])
        if call is not None:
            run.calls.append(call)
        run_of_span[span["span_id"]] = run
    ordered = sorted({id(r): r for r in run_of_agent.values()}.values(), key=lambda r: r.trajectory_id)
    return ordered, run_of_span


def _lone_run(
    trace_id: str, spans: list[Span], calls: dict[str, LLMCall | ToolCall], agent_spans: list[Span]
) -> tuple[list[Run], dict[str, Run]]:
    """The runs of a trace with at most one agent span (the usual trace): one run, the trace's, with
    every span and call. The general walk would find the same: a lone agent has no agent above it,
    so it is the trace's single top-level agent, and the spans outside it stay with the trace."""
    agent_span = agent_spans[0] if agent_spans else None
    # `calls` holds the calls of these spans in their order: all of them are the run's.
    run = Run(trace_id, agent_span, agents=agent_spans, spans=list(spans), calls=list(calls.values()))
    return [run], dict.fromkeys([span["span_id"] for span in spans], run)


def _nearest_agent(
    span_id: str | None, by_id: dict[str, Span], agent_ids: set[str], agent_of: dict[str, str | None]
) -> str | None:
    """The nearest agent ancestor of a span (inclusive), memoised in `agent_of` for every span on
    the way up. A parent chain longer than the trace (looping ids) has none. A module function,
    not a closure: a closure that calls itself is a reference cycle that keeps every span of the
    trace alive until the cyclic GC runs."""
    path: list[str] = []
    found: str | None = None
    while span_id is not None and span_id in by_id and len(path) <= len(by_id):
        if span_id in agent_of:
            found = agent_of[span_id]
            break
        path.append(span_id)
        if span_id in agent_ids:
            found = span_id
            break
        span_id = by_id[span_id].get("parent_span_id")
    for on_path in path:
        agent_of[on_path] = found
    return found


def _first_call(
    agent_id: str, own: dict[str | None, list[LLMCall]], children: dict[str | None, list[str]]
) -> LLMCall | None:
    """The first model call anywhere in an agent's subtree."""
    found = [own[agent_id][0]] if own.get(agent_id) else []
    found += [c for c in (_first_call(child, own, children) for child in children.get(agent_id, [])) if c]
    return min(found, key=_start_of) if found else None


def _start_of(call: LLMCall) -> int:
    return call.start_time or 0


def _own_conversation(
    agent_id: str,
    parent_id: str | None,
    own: dict[str | None, list[LLMCall]],
    children: dict[str | None, list[str]],
    first_call: Any,
) -> bool:
    """Whether a nested agent holds a conversation of its own (top-level agents always do)."""
    if parent_id is None:
        return True
    mine = first_call(agent_id)
    if mine is None:
        return False  # no model calls: its spans (tools, say) belong to the enclosing run
    enclosing = {signature(c) for c in own.get(parent_id, [])}
    if enclosing:
        return signature(mine) not in enclosing
    siblings = {signature(c) for c in (first_call(a) for a in children.get(parent_id, [])) if c}
    return len(siblings) > 1
