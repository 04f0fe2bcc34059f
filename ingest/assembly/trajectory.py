"""One agent run as a `trajectories` row: its conversation, tools, usage, names and ids."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ingest.assembly.conversation import build_conversation, final_output
from ingest.assembly.normalize import LLMCall, Span, ToolCall
from ingest.assembly.normalize.genai import tool_definitions
from ingest.assembly.normalize.genai_messages import messages_from_parts
from ingest.assembly.normalize.types import first, maybe_json, merge_tools, openai_tool
from ingest.assembly.runs import Run, to_datetime
from store.identity import SESSION_KEYS, SESSION_METADATA_KEYS, USER_KEYS, USER_METADATA_KEYS
from store.schema import PARTITION_COLUMN, WRITTEN_AT

# SESSION_KEYS, USER_KEYS and their metadata keys are declared in store (`store.identity`):
# `forget` erases a user's traces by the same keys assembly reads the user from.
_LLAMA_INDEX_AGENT = re.compile(r"current_agent_name='([^']+)'")
AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "traceloop.entity.name", "graph.node.id")
TRACE_NAME_KEYS = (
    "langfuse.trace.name",
    "traceloop.workflow.name",
    "gen_ai.workflow.name",
    "ai.telemetry.functionId",  # the Vercel AI SDK's name for the call site (the agent)
)


@dataclass(slots=True, init=False)  # the `__init__` is written out: see `LLMCall`
class _CallFacts:
    """What the row reads off a run's calls, gathered in one pass over them (`_call_facts`)."""

    llm_calls: list[LLMCall]
    tool_calls: int  # how many
    conventions: set[str]
    finish_reasons: list[str]
    response_ids: list[str]
    content_refs: list[dict[str, Any]]
    input_tokens: int | None  # the sum over the calls that report any, else None
    output_tokens: int | None
    errored: bool  # a model call failed
    has_content: bool  # a model call carries its messages
    # Tool definitions, by where they come from (`merge_tools` takes them in this order).
    declared_by_calls: list[list[dict[str, Any]]]
    declared_by_tools: list[dict[str, Any]]

    def __init__(
        self,
        llm_calls: list[LLMCall],
        tool_calls: int,
        conventions: set[str],
        finish_reasons: list[str],
        response_ids: list[str],
        content_refs: list[dict[str, Any]],
        input_tokens: int | None,
        output_tokens: int | None,
        errored: bool,
        has_content: bool,
        declared_by_calls: list[list[dict[str, Any]]],
        declared_by_tools: list[dict[str, Any]],
    ) -> None:
        self.llm_calls, self.tool_calls, self.conventions = llm_calls, tool_calls, conventions
        self.finish_reasons, self.response_ids, self.content_refs = finish_reasons, response_ids, content_refs
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.errored, self.has_content = errored, has_content
        self.declared_by_calls, self.declared_by_tools = declared_by_calls, declared_by_tools


def _call_facts(calls: list[LLMCall | ToolCall]) -> _CallFacts:
    """The run's calls split by kind, and what the row reads off them, in one pass."""
    llm_calls: list[LLMCall] = []
    conventions = set()
    finish_reasons: list[str] = []
    response_ids = []
    content_refs = []
    input_tokens = output_tokens = None
    errored = has_content = False
    declared_by_calls = []
    declared_by_tools = []
    for call in calls:
        conventions.add(call.convention)
        if isinstance(call, ToolCall):
            if call.name and (call.description or call.parameters):  # the tool span declares its tool
                tool = {"name": call.name, "description": call.description, "parameters": call.parameters}
                if definition := openai_tool(tool):
                    declared_by_tools.append(definition)
            continue
        llm_calls.append(call)
        finish_reasons += call.finish_reasons
        if call.response_id:
            response_ids.append(call.response_id)
        if call.content_refs:
            content_refs.append({"span_id": call.span_id, **call.content_refs})
        if call.input_tokens is not None:
            input_tokens = (input_tokens or 0) + call.input_tokens
        if call.output_tokens is not None:
            output_tokens = (output_tokens or 0) + call.output_tokens
        if call.error:
            errored = True
        if call.has_content:
            has_content = True
        if call.tools:  # an empty list adds nothing to `merge_tools`
            declared_by_calls.append(call.tools)
    return _CallFacts(
        llm_calls=llm_calls,
        tool_calls=len(calls) - len(llm_calls),
        conventions=conventions,
        finish_reasons=finish_reasons,
        response_ids=response_ids,
        content_refs=content_refs,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        errored=errored,
        has_content=has_content,
        declared_by_calls=declared_by_calls,
        declared_by_tools=declared_by_tools,
    )


def _tools(calls: _CallFacts, spans: list[Span]) -> list[dict[str, Any]]:
    """Tool definitions from everywhere a convention puts them (the chat calls, agent spans, the
    tool spans themselves), the most complete one per tool name."""
    return merge_tools(
        *calls.declared_by_calls,
        # Only spans that declare tools (a lookup here rather than a call per span).
        *[tool_definitions(s["attributes"]) for s in spans if "gen_ai.tool.definitions" in s["attributes"]],
        calls.declared_by_tools,
    )


def _agent_name(run: Run, trace_spans: list[Span]) -> str | None:
    """The name the framework gave the agent: an explicit agent-name attribute on any of the run's
    agent spans (outermost first), else the outermost agent span's own name, else a trace-level
    name (workflow, Langfuse trace, AI SDK function id), else the root span's service."""
    for agent in run.agents:
        name = first(agent["attributes"], *AGENT_NAME_KEYS)
        if name is not None:
            return str(name)
    if run.agent_span is not None:
        span_name = str(run.agent_span.get("name") or "")
        for prefix in ("invoke_agent ", "invoke_workflow "):
            if span_name.startswith(prefix):
                return span_name[len(prefix) :]
        for key in TRACE_NAME_KEYS:  # e.g. the AI SDK's function id on its generateText span
            if run.agent_span["attributes"].get(key):
                return str(run.agent_span["attributes"][key])
        return _without_method(span_name) or None
    for span in trace_spans:
        name = first(span["attributes"], *TRACE_NAME_KEYS, "gen_ai.agent.name")
        if name is not None:
            return str(name)
    for span in trace_spans:  # llama-index names its workflow agent only in its events' reprs
        found = _LLAMA_INDEX_AGENT.search(str(span["attributes"].get("output.value") or ""))
        if found:
            return found.group(1)
    roots = [s for s in trace_spans if not s.get("parent_span_id")]
    return (roots[0].get("service_name") or roots[0].get("name")) if roots else None


def _without_method(span_name: str) -> str:
    """`weather_agent.run` -> `weather_agent`: instrumentations name agent spans after the method."""
    for suffix in (".run", ".arun", ".invoke", ".ainvoke", ".kickoff", "._execute_core"):
        if span_name.endswith(suffix):
            return span_name[: -len(suffix)]
    return span_name


def _content_mode(calls: _CallFacts) -> str:
    """`inline` (messages on the telemetry), `referenced` (stored elsewhere, see `content_refs`)
    or `none` (not captured: turn content capture on)."""
    if calls.has_content:
        return "inline"
    return "referenced" if calls.content_refs else "none"


_NOT_A_NUMBER = {"infinity", "-infinity", "+infinity", "inf", "-inf", "nan"}


def _plain_params(params: dict[str, Any]) -> dict[str, Any]:
    """Sampling parameters as valid JSON: an unbounded value (Langfuse's `max_tokens: Infinity`) is
    no limit, stored as null, never as `Infinity` (not JSON) or the string "Infinity"."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        unbounded = (isinstance(value, float) and not math.isfinite(value)) or (
            isinstance(value, str) and value.strip().lower() in _NOT_A_NUMBER
        )
        out[str(name)] = None if unbounded else value
    return out


def _agent_output(run: Run) -> str | None:
    """The answer an agent span records as its own output (when its last model turn was a tool call)."""
    if run.agent_span is None:
        return None
    attrs = run.agent_span["attributes"]
    for key in (
        "gen_ai.output.messages",
        "output.value",
        "langfuse.observation.output",
        "traceloop.entity.output",
    ):
        if key not in attrs:  # the usual agent span records none of them
            continue
        value = maybe_json(attrs[key])
        if isinstance(value, list):  # output messages: the last assistant text
            texts = [m for m in messages_from_parts(value, default_role="assistant") if m.get("content")]
            value = texts[-1]["content"] if texts else None
        if isinstance(value, dict):
            value = first(value, "output", "answer", "content", "final_output")
        if isinstance(value, str) and value.strip():
            return value
    return None


def _lookup(spans: list[Span], keys: tuple[str, ...], metadata_keys: tuple[str, ...] = ()) -> str | None:
    """The first of `keys` on the spans, else on their events (GenAI log records land there), else
    in an OpenInference `metadata` JSON object (LangChain puts the run's config metadata there)."""
    wanted = frozenset(keys)
    with_events: list[Span] = []  # the later looks go over only the spans they can find anything in
    with_metadata: list[Span] = []
    for span in spans:
        attrs = span["attributes"]
        if not attrs.keys().isdisjoint(wanted):
            value = first(attrs, *keys)
            if value is not None:
                return str(value)
        if span.get("events"):
            with_events.append(span)
        if "metadata" in attrs:
            with_metadata.append(span)
    for span in with_events:
        for event in span["events"]:
            if not event["attributes"].keys().isdisjoint(wanted):
                value = first(event["attributes"], *keys)
                if value is not None:
                    return str(value)
    for span in with_metadata:
        metadata = maybe_json(span["attributes"]["metadata"])
        if isinstance(metadata, dict):
            value = first(metadata, *metadata_keys)
            if isinstance(value, (str, int)):
                return str(value)
    return None


# The attributes `_lookup` finds a session or user id in (with the spans' events).
_IDENTITY_KEYS = frozenset((*SESSION_KEYS, *USER_KEYS, "metadata"))


def _identity_spans(spans: list[Span]) -> list[Span]:
    """The spans a session or user id can be found on by `_lookup` (in their order): the ones with
    one of its keys, events or metadata. Most spans have none: both lookups skip them at once."""
    # The set tests the span's keys (each hashed already): cheaper than the keys view testing the set's.
    return [s for s in spans if s.get("events") or not _IDENTITY_KEYS.isdisjoint(s["attributes"])]


def _session_and_user(run_spans: list[Span], trace_spans: list[Span]) -> tuple[str | None, str | None]:
    """`_lookup` of the session and the user on the run's spans, else on the whole trace's. A run
    with every span of the trace (the usual lone run) holds them in the same order: the second look
    would find the same."""
    run_candidates = _identity_spans(run_spans)
    session = _lookup(run_candidates, SESSION_KEYS, SESSION_METADATA_KEYS)
    user = _lookup(run_candidates, USER_KEYS, USER_METADATA_KEYS)
    if (session and user) or len(run_spans) == len(trace_spans):
        return session, user
    trace_candidates = _identity_spans(trace_spans)
    return (
        session or _lookup(trace_candidates, SESSION_KEYS, SESSION_METADATA_KEYS),
        user or _lookup(trace_candidates, USER_KEYS, USER_METADATA_KEYS),
    )


def _json(value: Any) -> str:
    """Compact JSON text with sorted keys (orjson; the standard library for what it cannot write)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, sort_keys=True, default=str)


def trajectory_row(run: Run, trace_spans: list[Span], has_root: bool) -> dict[str, Any] | None:
    """The run's `trajectories` row; None for a run without model calls."""
    calls = _call_facts(run.calls)
    if not calls.llm_calls:
        return None
    agent_output = _agent_output(run)
    messages, tool_output = build_conversation(run.calls, agent_output)
    last = calls.llm_calls[-1]
    starts = [s["start_time"] for s in run.spans if s.get("start_time")]
    ends = [s["end_time"] for s in run.spans if s.get("end_time")]
    sources = {str(s.get("source") or "otel") for s in run.spans}
    errored = calls.errored or (run.agent_span is not None and run.agent_span.get("status_code") == "ERROR")
    metadata = {
        "llm_calls": len(calls.llm_calls),
        "tool_calls": calls.tool_calls,
        "span_count": len(run.spans),
        "conventions": sorted(calls.conventions),
        "provider": last.provider,
        "params": _plain_params(last.params),
        "finish_reasons": calls.finish_reasons,
        "response_ids": calls.response_ids,
        "service_name": next((s.get("service_name") for s in run.spans if s.get("service_name")), None),
        "parent_trajectory_id": run.parent_id,
        # Content the telemetry only references (uploaded elsewhere): never silently empty.
        "content_refs": calls.content_refs,
        "content": _content_mode(calls),
        "agent_span_id": run.agent_span["span_id"] if run.agent_span else None,
    }
    started = to_datetime(min(starts))
    session_id, user_id = _session_and_user(run.spans, trace_spans)
    return {
        "trajectory_id": run.trajectory_id,
        "source": "langfuse" if sources == {"langfuse"} else "otel",
        "trace_id": trace_spans[0]["trace_id"],
        "session_id": session_id,
        "user_id": user_id,
        "agent_name": _agent_name(run, trace_spans),
        "model": last.model,
        "started_at": started,
        "ended_at": to_datetime(max(ends)) if ends else None,
        "messages": messages,
        "tools": _json(_tools(calls, run.spans)),
        "final_output": final_output(messages) or tool_output or agent_output,
        "input_tokens": calls.input_tokens,
        "output_tokens": calls.output_tokens,
        "scenario_id": None,
        "group_id": None,
        "policy": last.model,
        "turns": [],
        "metadata": _json(metadata),
        "has_content": calls.has_content,
        "status": "error" if errored else ("ok" if has_root else "truncated"),
        WRITTEN_AT: None,
        PARTITION_COLUMN: started.date(),
    }
