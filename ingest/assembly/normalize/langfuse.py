"""Langfuse observations (`langfuse.observation.*` attributes), from the SDK's OTel export or the puller.

Generations carry their prompt and completion in `langfuse.observation.input` /
`.output` as JSON text of whatever the application passed: usually OpenAI-style chat
messages (a list, or `{"messages": [...], "tools": [...]}` as the OpenAI integration
records it), an assistant message or a `choices` response, sometimes a bare string or
arbitrary JSON. Chat shapes become messages; anything else becomes a single user (or
assistant) message holding the text, so nothing is dropped.
"""

from __future__ import annotations

from typing import Any

from ingest.assembly.normalize.genai_messages import messages_from_openai, messages_from_parts
from ingest.assembly.normalize.types import (
    LLMCall,
    Message,
    Span,
    ToolCall,
    as_int,
    as_json_text,
    as_text,
    first,
    make_message,
    maybe_json,
    openai_tools,
    text_or_none,
)

PREFIX = "langfuse.observation."
LLM_TYPES = {"generation"}
TOOL_TYPES = {"tool"}


def is_langfuse_span(attrs: dict[str, Any]) -> bool:
    return f"{PREFIX}type" in attrs


def _is_chat(items: Any) -> bool:
    return isinstance(items, list) and bool(items) and all(isinstance(m, dict) and "role" in m for m in items)


def _messages(raw: Any, default_role: str) -> tuple[list[Message], list[dict[str, Any]]]:
    """Messages and tool definitions from a Langfuse input/output value."""
    value = maybe_json(raw)
    tools: list[dict[str, Any]] = []
    if isinstance(value, dict):
        tools = openai_tools(value.get("tools"))
        if isinstance(value.get("choices"), list):
            value = [c.get("message") for c in value["choices"] if isinstance(c, dict) and c.get("message")]
        elif "messages" in value:
            value = value["messages"]
        elif "role" in value:
            value = [value]
    if _is_chat(value):
        if any("parts" in m for m in value):
            return messages_from_parts(value, default_role=default_role), tools
        return messages_from_openai(value), tools
    if value in (None, ""):
        return [], tools
    return [make_message(default_role, as_text(value))], tools


def _text(value: Any) -> str | None:
    value = maybe_json(value)
    return None if value is None else str(value)


def _usage(attrs: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = maybe_json(attrs.get(f"{PREFIX}usage_details"))
    if not isinstance(usage, dict):
        return None, None
    return (
        as_int(first(usage, "input", "prompt_tokens", "input_tokens")),
        as_int(first(usage, "output", "completion_tokens", "output_tokens")),
    )


def _error(span: Span, attrs: dict[str, Any]) -> str | None:
    if attrs.get(f"{PREFIX}level") == "ERROR" or span.get("status_code") == "ERROR":
        return str(attrs.get(f"{PREFIX}status_message") or span.get("status_message") or "error")
    return None


def normalize_langfuse(span: Span) -> LLMCall | ToolCall | None:
    """The observation as an LLM call (generation) or tool call (tool), or None for other types."""
    attrs = span.get("attributes") or {}
    kind = str(attrs.get(f"{PREFIX}type", "")).lower()
    if kind in TOOL_TYPES:
        arguments = attrs.get(f"{PREFIX}input")  # JSON text as the SDK serialised it: kept verbatim
        return ToolCall(
            span,
            "langfuse",
            name=span.get("name"),
            # Langfuse JSON-encodes each metadata value (`"\"call_1\""`).
            call_id=_text(first(attrs, "gen_ai.tool.call.id", f"{PREFIX}metadata.tool_call_id")),
            arguments=as_json_text(arguments),
            result=as_text(maybe_json(attrs.get(f"{PREFIX}output"))),
            error=_error(span, attrs),
        )
    if kind not in LLM_TYPES:
        return None
    inputs, tools = _messages(attrs.get(f"{PREFIX}input"), "user")
    outputs, _ = _messages(attrs.get(f"{PREFIX}output"), "assistant")
    params = maybe_json(attrs.get(f"{PREFIX}model.parameters"))
    params = dict(params) if isinstance(params, dict) else {}
    if not tools and isinstance(params.get("tools"), list):
        tools = openai_tools(params.pop("tools"))
    input_tokens, output_tokens = _usage(attrs)
    model = first(attrs, f"{PREFIX}model.name", "gen_ai.response.model", "gen_ai.request.model")
    return LLMCall(
        span,
        "langfuse",
        input_messages=inputs,
        output_messages=outputs,
        tools=tools,
        request_model=text_or_none(model),
        response_model=text_or_none(model),
        provider=text_or_none(attrs.get("gen_ai.provider.name")),
        params=params,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error=_error(span, attrs),
    )
