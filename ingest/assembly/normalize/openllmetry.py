"""OpenLLMetry (traceloop): the indexed `gen_ai.prompt.N.*` format and its 2026 GenAI-semconv format.

Until March 2026 OpenLLMetry flattened messages into indexed attributes
(`gen_ai.prompt.0.role`, `gen_ai.completion.0.tool_calls.0.arguments`, tool
definitions under `llm.request.functions.N.*`); since then it emits the OTel
`gen_ai.input.messages` / `gen_ai.output.messages` (plus `gen_ai.tool.definitions`),
which the GenAI normaliser reads. Both formats are in production, so both are read here.
Workflow spans (`traceloop.span.kind` = tool) carry tool executions in
`traceloop.entity.input` / `traceloop.entity.output`.
"""

from __future__ import annotations

from typing import Any

from ingest.assembly.normalize.genai import llm_call, normalize_genai_llm
from ingest.assembly.normalize.types import (
    LLMCall,
    Message,
    Span,
    ToolCall,
    as_json_text,
    as_text,
    error_of,
    indexed,
    make_message,
    make_tool_call,
    maybe_json,
    openai_tools,
    strip_or_none,
    text_attr,
    text_or_none,
)

# The keys that mark a span as OpenLLMetry's. Indexed messages start at 0: a few lookups rather
# than a scan of every key.
MARKERS = frozenset(
    [
        "llm.request.type",
        "traceloop.span.kind",
        *(
            f"gen_ai.{side}.0.{field}"
            for side in ("prompt", "completion")
            for field in ("role", "content", "tool_calls.0.name", "finish_reason")
        ),
    ]
)


def is_openllmetry_span(attrs: dict[str, Any]) -> bool:
    return not attrs.keys().isdisjoint(MARKERS)


def _indexed_messages(attrs: dict[str, Any], prefix: str, default_role: str) -> list[Message]:
    out = []
    for fields in indexed(attrs, prefix).values():
        calls = [
            make_tool_call(call.get("id"), call.get("name"), call.get("arguments"))
            for call in indexed(fields, "tool_calls").values()
        ]
        content = fields.get("content")
        if content is None and fields.get("refusal"):
            content = fields["refusal"]
        out.append(
            make_message(
                str(fields.get("role") or default_role),
                as_text(maybe_json(content)) if not isinstance(content, str) else content,
                name=fields.get("name"),
                tool_call_id=strip_or_none(fields.get("tool_call_id")),
                tool_calls=calls,
            )
        )
    return out


def _indexed_tools(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return openai_tools(
        [
            {"name": f.get("name"), "description": f.get("description"), "parameters": f.get("parameters")}
            for f in indexed(attrs, "llm.request.functions").values()
        ]
    )


def normalize_openllmetry(span: Span) -> LLMCall | ToolCall | None:
    """The span as an LLM call or tool call under OpenLLMetry's conventions, or None."""
    attrs = span.get("attributes") or {}
    kind = text_attr(attrs, "traceloop.span.kind")
    if kind == "tool":
        output = maybe_json(attrs.get("traceloop.entity.output"))
        if isinstance(output, dict) and "outputs" in output:
            output = output["outputs"]
        inputs = maybe_json(attrs.get("traceloop.entity.input"))
        if isinstance(inputs, dict) and "inputs" in inputs:
            inputs = inputs["inputs"]
        return ToolCall(
            span,
            "openllmetry",
            name=text_or_none(attrs.get("traceloop.entity.name") or span.get("name")),
            call_id=strip_or_none(attrs.get("gen_ai.tool.call.id")),
            arguments=as_json_text(inputs),
            result=as_text(output),
            error=error_of(span),
        )
    if kind in ("workflow", "task", "agent"):
        return None
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        call = normalize_genai_llm(span, convention="openllmetry")
        call.tools = call.tools or _indexed_tools(attrs)
        return call
    if "llm.request.type" not in attrs and not any(k.startswith("gen_ai.prompt.") for k in attrs):
        return None
    inputs = _indexed_messages(attrs, "gen_ai.prompt", "user")
    outputs = _indexed_messages(attrs, "gen_ai.completion", "assistant")
    call = llm_call(span, attrs, "openllmetry", inputs, outputs, _indexed_tools(attrs))
    if not call.finish_reasons:
        call.finish_reasons = [
            str(f["finish_reason"])
            for f in indexed(attrs, "gen_ai.completion").values()
            if f.get("finish_reason")
        ]
    return call
