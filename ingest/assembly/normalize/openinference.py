"""OpenInference (Arize): `llm.input_messages.N.message.*`, `llm.tools.N.tool.json_schema`, TOOL spans.

Messages are flattened with indexes, tool calls nested one level deeper
(`...message.tool_calls.J.tool_call.function.arguments`), multi-part content under
`message.contents.K.message_content.*`. Sampling parameters come as one JSON object in
`llm.invocation_parameters`. When the flattened messages are missing (an instrumentor
configured to hide them), `input.value` / `output.value` holding the raw OpenAI request
and response are read instead.
"""

from __future__ import annotations

from typing import Any

from ingest.assembly.normalize.genai_messages import messages_from_openai
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
    indexed,
    make_message,
    make_tool_call,
    maybe_json,
    openai_tools,
    strip_or_none,
    text_or_none,
)

_PARAMS = (
    "temperature",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "max_tokens",
    "seed",
    "stop",
)


def is_openinference_span(attrs: dict[str, Any]) -> bool:
    return "openinference.span.kind" in attrs


def _messages(attrs: dict[str, Any], prefix: str, default_role: str) -> list[Message]:
    out = []
    for fields in indexed(attrs, prefix).values():
        content = fields.get("message.content")
        if content is None:
            parts = indexed(fields, "message.contents")
            texts = [str(p["message_content.text"]) for p in parts.values() if p.get("message_content.text")]
            content = "".join(texts) if texts else None
        calls = [
            make_tool_call(
                call.get("tool_call.id"),
                call.get("tool_call.function.name"),
                call.get("tool_call.function.arguments"),
            )
            for call in indexed(fields, "message.tool_calls").values()
        ]
        out.append(
            make_message(
                str(fields.get("message.role") or default_role),
                content,
                name=fields.get("message.name"),
                tool_call_id=strip_or_none(fields.get("message.tool_call_id")),
                tool_calls=calls,
            )
        )
    return out


def _from_raw_values(attrs: dict[str, Any]) -> tuple[list[Message], list[Message]]:
    """Messages from the raw request and response in `input.value` / `output.value`: an OpenAI chat
    request and response, or a Responses API response (a list of them when streamed)."""
    request = maybe_json(attrs.get("input.value"))
    response = maybe_json(attrs.get("output.value"))
    inputs = messages_from_openai(request.get("messages")) if isinstance(request, dict) else []
    outputs: list[Message] = []
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        outputs = messages_from_openai([c.get("message") for c in response["choices"] if isinstance(c, dict)])
    responses = response if isinstance(response, list) else [response]
    for item in responses:
        if isinstance(item, dict) and item.get("object") == "response":
            outputs += _response_output(item.get("output"))
    return inputs, outputs


def _response_output(items: Any) -> list[Message]:
    """A Responses API `output` (message and function_call items) as one assistant message."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += [
                str(p.get("text", ""))
                for p in item.get("content") or []
                if isinstance(p, dict) and p.get("type") in ("output_text", "text")
            ]
        elif item.get("type") == "function_call":
            calls.append(
                make_tool_call(item.get("call_id") or item.get("id"), item.get("name"), item.get("arguments"))
            )
    if not texts and not calls:
        return []
    return [make_message("assistant", "".join(texts) if texts else None, tool_calls=calls)]


def _answering_model(output: Any) -> str | None:
    """The model that answered, from a raw response in `output.value`: the OpenAI response's
    `model`, or LangChain's `generation_info` / `response_metadata` `model_name`."""
    if not isinstance(output, dict):
        return None
    if isinstance(output.get("model"), str) and output.get("object", "").startswith(
        ("chat.completion", "response")
    ):
        return output["model"]
    generations = output.get("generations")
    if isinstance(generations, list) and generations and isinstance(generations[0], list) and generations[0]:
        generation = generations[0][0] if isinstance(generations[0][0], dict) else {}
        info = generation.get("generation_info") or {}
        message = (generation.get("message") or {}).get("kwargs") or {}
        for source in (info, message.get("response_metadata") or {}):
            if isinstance(source, dict) and isinstance(source.get("model_name"), str):
                return source["model_name"]
    llm_output = output.get("llm_output")
    if isinstance(llm_output, dict) and isinstance(llm_output.get("model_name"), str):
        return llm_output["model_name"]
    return None


def normalize_openinference(span: Span) -> LLMCall | ToolCall | None:
    """The span as an LLM call or tool call under OpenInference, or None for other span kinds."""
    attrs = span.get("attributes") or {}
    kind = str(attrs.get("openinference.span.kind", "")).upper()
    if kind == "TOOL":
        return ToolCall(
            span,
            "openinference",
            name=first(attrs, "tool.name", "tool_call.function.name") or span.get("name"),
            call_id=strip_or_none(first(attrs, "tool.id", "tool_call.id")),
            arguments=as_json_text(maybe_json(first(attrs, "tool_call.function.arguments", "input.value"))),
            result=as_text(maybe_json(attrs.get("output.value"))),
            description=attrs.get("tool.description"),
            parameters=maybe_json(attrs.get("tool.parameters")),
            error=error_of(span),
        )
    if kind != "LLM":
        return None
    inputs = _messages(attrs, "llm.input_messages", "user")
    outputs = _messages(attrs, "llm.output_messages", "assistant")
    if not inputs or not outputs:
        raw_inputs, raw_outputs = _from_raw_values(attrs)
        inputs, outputs = inputs or raw_inputs, outputs or raw_outputs
    if not inputs and not outputs:  # legacy completions API
        inputs = [make_message("user", p.get("prompt.text")) for p in indexed(attrs, "llm.prompts").values()]
        outputs = [
            make_message("assistant", c.get("completion.text"))
            for c in indexed(attrs, "llm.choices").values()
        ]
    if not inputs and not outputs and not any(k.startswith("llm.token_count.") for k in attrs):
        # An LLM-kind span that neither carries content nor counts tokens is no model call we
        # can say anything about (llama-index's `_prepare_chat_with_tools` wraps the real one).
        return None
    invocation = maybe_json(attrs.get("llm.invocation_parameters"))
    params = {k: invocation[k] for k in _PARAMS if isinstance(invocation, dict) and k in invocation}
    tools = openai_tools([f.get("tool.json_schema") for f in indexed(attrs, "llm.tools").values()])
    request_model = first(attrs, "llm.request.model_name")
    if request_model is None and isinstance(invocation, dict):
        request_model = invocation.get("model")
    finish = attrs.get("llm.finish_reason")
    return LLMCall(
        span,
        "openinference",
        input_messages=inputs,
        output_messages=outputs,
        tools=tools,
        request_model=text_or_none(request_model),
        response_model=text_or_none(
            first(attrs, "llm.response.model_name")
            or _answering_model(maybe_json(attrs.get("output.value")))
            or first(attrs, "llm.model_name")
        ),
        provider=text_or_none(first(attrs, "llm.provider", "llm.system")),
        params=params,
        input_tokens=as_int(attrs.get("llm.token_count.prompt")),
        output_tokens=as_int(attrs.get("llm.token_count.completion")),
        finish_reasons=[str(finish)] if finish else [],
        error=error_of(span),
    )
