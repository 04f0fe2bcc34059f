"""The Vercel AI SDK's own telemetry (`ai.*` attributes, `ai.operationId`), its long-standing default.

Model calls are the `ai.generateText.doGenerate` / `ai.streamText.doStream` (and `*Object`)
spans: the prompt in `ai.prompt.messages` (the SDK's message shape: `content` a string or a
list of `text`, `tool-call`, `tool-result` parts), the answer in `ai.response.text` and
`ai.response.toolCalls`, tools as a list of JSON texts in `ai.prompt.tools`. Tools run in
`ai.toolCall` spans. The SDK's newer GenAI-semconv telemetry goes through `genai` instead.
"""

from __future__ import annotations

from typing import Any

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
    make_message,
    make_tool_call,
    maybe_json,
    openai_tools,
    strip_or_none,
    text_attr,
    text_or_none,
)

MODEL_OPERATIONS = {
    "ai.generateText.doGenerate",
    "ai.streamText.doStream",
    "ai.generateObject.doGenerate",
    "ai.streamObject.doStream",
}
TOOL_OPERATION = "ai.toolCall"


def is_vercel_span(attrs: dict[str, Any]) -> bool:
    return "ai.operationId" in attrs


def _result_text(part: dict[str, Any]) -> str | None:
    output = part.get("output", part.get("result"))
    if (
        isinstance(output, dict)
        and "value" in output
        and output.get("type")
        in (
            "text",
            "json",
            "error-text",
            "error-json",
            "content",
        )
    ):
        output = output["value"]
    return as_text(maybe_json(output) if isinstance(output, str) and output[:1] == '"' else output)


def sdk_messages(raw: Any) -> list[Message]:
    """The SDK's prompt messages as lake messages (tool results become one tool message each)."""
    raw = maybe_json(raw)
    out: list[Message] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        role = str(item.get("role") or "user")
        content = item.get("content")
        if not isinstance(content, list):
            out.append(make_message(role, as_text(content)))
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "tool-call":
                calls.append(
                    make_tool_call(
                        part.get("toolCallId"), part.get("toolName"), part.get("input", part.get("args"))
                    )
                )
            elif kind == "tool-result":
                error = isinstance(part.get("output"), dict) and str(
                    part["output"].get("type", "")
                ).startswith("error")
                out.append(
                    make_message(
                        "tool",
                        _result_text(part),
                        name=part.get("toolName"),
                        tool_call_id=strip_or_none(part.get("toolCallId")),
                        is_error=error or None,
                    )
                )
            elif kind != "reasoning":
                texts.append(as_json_text(part) or "")
        if texts or calls:
            out.append(make_message(role, "".join(texts) if texts else None, tool_calls=calls))
    return out


def _answer(attrs: dict[str, Any]) -> list[Message]:
    calls = [
        make_tool_call(c.get("toolCallId"), c.get("toolName"), c.get("input", c.get("args")))
        for c in maybe_json(attrs.get("ai.response.toolCalls")) or []
        if isinstance(c, dict)
    ]
    text = attrs.get("ai.response.text")
    if not calls and not text:
        return []
    return [make_message("assistant", str(text) if text else None, tool_calls=calls)]


def normalize_vercel(span: Span) -> LLMCall | ToolCall | None:
    """A model call or tool call of the AI SDK's telemetry, or None for its other spans."""
    attrs = span.get("attributes") or {}
    operation = text_attr(attrs, "ai.operationId")
    if operation == TOOL_OPERATION:
        return ToolCall(
            span,
            "vercel",
            name=text_or_none(attrs.get("ai.toolCall.name")),
            call_id=strip_or_none(attrs.get("ai.toolCall.id")),
            arguments=as_json_text(attrs.get("ai.toolCall.args", attrs.get("ai.toolCall.input"))),
            result=as_text(maybe_json(attrs.get("ai.toolCall.result", attrs.get("ai.toolCall.output")))),
            error=error_of(span),
        )
    if operation not in MODEL_OPERATIONS:
        return None
    inputs = sdk_messages(attrs.get("ai.prompt.messages"))
    outputs = _answer(attrs)
    tools = openai_tools(maybe_json(attrs.get("ai.prompt.tools")))
    finish = attrs.get("ai.response.finishReason")
    params = {
        name: attrs[f"ai.settings.{key}"]
        for name, key in (
            ("temperature", "temperature"),
            ("top_p", "topP"),
            ("max_tokens", "maxOutputTokens"),
        )
        if attrs.get(f"ai.settings.{key}") is not None
    }
    return LLMCall(
        span,
        "vercel",
        input_messages=inputs,
        output_messages=outputs,
        tools=tools,
        request_model=text_or_none(first(attrs, "ai.model.id", "gen_ai.request.model")),
        response_model=text_or_none(first(attrs, "ai.response.model", "gen_ai.response.model")),
        provider=first(attrs, "ai.model.provider", "gen_ai.system"),
        params=params,
        input_tokens=as_int(
            first(attrs, "ai.usage.inputTokens", "ai.usage.promptTokens", "gen_ai.usage.input_tokens")
        ),
        output_tokens=as_int(
            first(attrs, "ai.usage.outputTokens", "ai.usage.completionTokens", "gen_ai.usage.output_tokens")
        ),
        response_id=first(attrs, "ai.response.id", "gen_ai.response.id"),
        finish_reasons=[str(finish)] if finish else [],
        error=error_of(span),
    )
