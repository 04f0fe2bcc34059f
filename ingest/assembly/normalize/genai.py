"""OpenTelemetry GenAI semantic conventions: content on span attributes (v1.37+) and the deprecated events.

Content arrives three ways, all handled here:

- `gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages` on the
  span (JSON text of `{role, parts[]}` messages; the current conventions);
- the deprecated per-message events (`gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`), as span events or
  as log records from `/v1/logs` that the assembler attaches to their span;
- the opt-in `gen_ai.client.inference.operation.details` event carrying the same
  attributes as the span.

The message shapes themselves are `genai_messages`.
"""

from __future__ import annotations

from typing import Any

from ingest.assembly.normalize.genai_events import (
    details_attributes,
    has_message_events,
    messages_from_events,
    tool_event_io,
)
from ingest.assembly.normalize.genai_messages import (
    HistoryMemo,
    messages_from_parts,
    system_messages,
)
from ingest.assembly.normalize.types import (
    LLMCall,
    Message,
    Span,
    ToolCall,
    as_int,
    as_json_text,
    as_text,
    error_of,
    first,
    maybe_json,
    merge_tools,
    openai_tools,
    strip_or_none,
    text_attr,
    text_or_none,
)

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "responses"}
TOOL_OPERATIONS = {"execute_tool"}
AGENT_OPERATIONS = {"invoke_agent", "create_agent"}
# Content uploaded elsewhere and referenced from the span (semantic-conventions-genai v0.1.0).
CONTENT_REFS = ("gen_ai.system_instructions.ref", "gen_ai.input.messages.ref", "gen_ai.output.messages.ref")
_PARAMS = ("temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty", "max_tokens", "seed")


def is_llm_span(attrs: dict[str, Any]) -> bool:
    op = text_attr(attrs, "gen_ai.operation.name")
    if op is not None:
        return op in LLM_OPERATIONS
    return any(
        key in attrs
        for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.input.messages.ref")
    )


def is_tool_span(attrs: dict[str, Any]) -> bool:
    return text_attr(attrs, "gen_ai.operation.name") in TOOL_OPERATIONS


# --- spans ---------------------------------------------------------------------------------------


_PARAM_OF_KEY = tuple((f"gen_ai.request.{name}", name) for name in _PARAMS)
# Model, provider and usage: each by its current name, then the older names some
# instrumentations still send (a precedence list for `first`). Most spans carry the current ones.
_CALL_NAMES = (
    ("gen_ai.request.model", "llm.request.model"),
    ("gen_ai.response.model", "llm.response.model"),
    ("gen_ai.provider.name", "gen_ai.system", "llm.system"),
    ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
)


def llm_call(
    span: Span,
    attrs: dict[str, Any],
    convention: str,
    input_messages: list[Message],
    output_messages: list[Message],
    tools: list[dict[str, Any]],
) -> LLMCall:
    """The call's model, provider, sampling parameters, usage and ids, shared by every
    gen_ai-flavoured convention, with the content (messages, tools) its normaliser read."""
    get = attrs.get
    params: dict[str, Any] = {}
    for key, name in _PARAM_OF_KEY:  # seven lookups cost less than a pass over every attribute
        value = get(key)
        if value is not None:
            params[name] = value
    stops = get("gen_ai.request.stop_sequences")
    if stops:
        params["stop"] = list(stops) if isinstance(stops, (list, tuple)) else [stops]
    finish = get("gen_ai.response.finish_reasons")
    if not finish:
        finish_reasons = []
    else:
        finish_reasons = list(map(str, finish)) if isinstance(finish, (list, tuple)) else [str(finish)]
    # The current name of each (`_CALL_NAMES`), looked up directly: most spans set them all, and each
    # one set (not empty) is what `first` would take; otherwise the precedence lists.
    request_model = get("gen_ai.request.model")
    response_model = get("gen_ai.response.model")
    provider = get("gen_ai.provider.name")
    input_tokens = get("gen_ai.usage.input_tokens")
    output_tokens = get("gen_ai.usage.output_tokens")
    if not (request_model and response_model and provider and input_tokens and output_tokens):
        request_model, response_model, provider, input_tokens, output_tokens = [
            first(attrs, *names) for names in _CALL_NAMES
        ]
    return LLMCall(
        span,
        convention,
        input_messages=input_messages,
        output_messages=output_messages,
        tools=tools,
        request_model=text_or_none(request_model),  # a model is text, a number too
        response_model=text_or_none(response_model),
        provider=text_or_none(provider),
        params=params,
        input_tokens=input_tokens if type(input_tokens) is int else as_int(input_tokens),  # usually an int
        output_tokens=output_tokens if type(output_tokens) is int else as_int(output_tokens),
        response_id=get("gen_ai.response.id"),
        finish_reasons=finish_reasons,
        error=error_of(span) if "error.type" in attrs or span.get("status_code") == "ERROR" else None,
    )


def tool_definitions(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    if "gen_ai.tool.definitions" not in attrs:
        return []
    return openai_tools(maybe_json(attrs["gen_ai.tool.definitions"]))


def normalize_genai_llm(span: Span, *, convention: str = "genai", memo: HistoryMemo | None = None) -> LLMCall:
    """An LLM call from GenAI semconv attributes (on the span or its details events), falling back
    to the deprecated per-message events."""
    attrs = span.get("attributes") or {}
    events = span.get("events")
    details = details_attributes(events) if events else {}
    source = {**details, **attrs} if details else attrs
    get = source.get
    # Absent content (None) parses to no messages: the parsers are skipped for it.
    system = get("gen_ai.system_instructions")
    inputs = system_messages(system) if system is not None else []
    history = get("gen_ai.input.messages")
    if history is not None:
        inputs += memo.messages_of(history) if memo is not None else messages_from_parts(history)
    answer = get("gen_ai.output.messages")
    if isinstance(answer, str):
        answer = maybe_json(answer)
    if answer is None:
        outputs = []
    elif memo is not None:
        outputs = memo.answer_of(answer)
    else:
        outputs = messages_from_parts(answer, default_role="assistant")
    event_reasons: list[str] = []
    if not inputs and not outputs and events:
        inputs, outputs, event_reasons = messages_from_events(events)
    tools = tool_definitions(attrs) if "gen_ai.tool.definitions" in attrs else []
    if details:
        tools = merge_tools(tools, tool_definitions(details))
    call = llm_call(span, attrs, convention, inputs, outputs, tools)
    if not call.finish_reasons:
        if event_reasons:
            call.finish_reasons = event_reasons
        elif answer is not None:
            call.finish_reasons = output_finish_reasons(answer)
    if not source.keys().isdisjoint(CONTENT_REFS):
        refs = {key[len("gen_ai.") : -len(".ref")]: source[key] for key in CONTENT_REFS if key in source}
        call.content_refs = {k: v for k, v in refs.items() if v}
    return call


def output_finish_reasons(raw: Any) -> list[str]:
    """`finish_reason` of each output message (where the span has no `gen_ai.response.finish_reasons`)."""
    raw = maybe_json(raw)
    if not isinstance(raw, list):
        return []
    return [str(m["finish_reason"]) for m in raw if isinstance(m, dict) and m.get("finish_reason")]


def normalize_genai_tool(span: Span) -> ToolCall:
    attrs = span.get("attributes") or {}
    get = attrs.get
    name = get("gen_ai.tool.name")
    if name is None and str(span.get("name", "")).startswith("execute_tool "):
        name = span["name"].split(" ", 1)[1]
    arguments, result = get("gen_ai.tool.call.arguments"), get("gen_ai.tool.call.result")
    events = span.get("events")
    if (arguments is None or result is None) and events:  # no events: nothing to read there
        from_events = tool_event_io([e for e in events if isinstance(e, dict)])
        arguments = from_events[0] if arguments is None else arguments
        result = from_events[1] if result is None else result
    error = error_of(span) if "error.type" in attrs or span.get("status_code") == "ERROR" else None
    status = get("gen_ai.tool.status")
    if error is None and status and str(status).lower() == "error":
        error = "error"
    if isinstance(result, str):  # JSON text is rendered from what it holds, like any structured result
        result = maybe_json(result)
    parameters = get("gen_ai.tool.json_schema")
    if isinstance(parameters, str):
        parameters = maybe_json(parameters)
    return ToolCall(
        span,
        "genai",
        name=str(name) if name is not None else None,
        call_id=strip_or_none(get("gen_ai.tool.call.id")),
        arguments=as_json_text(arguments),  # text as the model wrote it
        result=as_text(result),
        description=get("gen_ai.tool.description"),
        parameters=parameters,
        error=error,
    )


def normalize_genai(span: Span, memo: HistoryMemo | None = None) -> LLMCall | ToolCall | None:
    """The span as an LLM call or tool call under the GenAI conventions, or None when it is neither."""
    attrs = span.get("attributes") or {}
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str):  # `is_tool_span` / `is_llm_span`, reading the operation once
        if op in TOOL_OPERATIONS:
            return normalize_genai_tool(span)
        if op in LLM_OPERATIONS:
            return normalize_genai_llm(span, memo=memo)
    elif is_llm_span(attrs):
        return normalize_genai_llm(span, memo=memo)
    # Old instrumentations name no operation; a span that names another one (an agent, an event
    # loop cycle) only repeats the conversation in its events.
    if "gen_ai.operation.name" not in attrs and has_message_events(span.get("events") or []):
        return normalize_genai_llm(span)
    return None
