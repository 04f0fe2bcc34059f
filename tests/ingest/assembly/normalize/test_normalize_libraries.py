"""The tracing libraries' conventions: OpenLLMetry (indexed prompts and completions,
tool/workflow spans), OpenInference (flattened messages, raw request and response) and Langfuse
(generation shapes, tools and other observation types).
"""

from __future__ import annotations

import json
from typing import Any

from ingest.assembly.normalize import LLMCall, ToolCall, normalize_span
from ingest.assembly.normalize.langfuse import normalize_langfuse
from ingest.assembly.normalize.openinference import normalize_openinference
from ingest.assembly.normalize.openllmetry import normalize_openllmetry
from tests.ingest.assembly.normalize.normalize_spans import brief, get_span


def test_openllmetry_legacy_indexed_format() -> None:
    call = normalize_openllmetry(
        get_span(
            {
                "llm.request.type": "chat",
                "gen_ai.system": "OpenAI",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024",
                "gen_ai.usage.prompt_tokens": 30,
                "gen_ai.usage.completion_tokens": 7,
                "gen_ai.prompt.0.role": "system",
                "gen_ai.prompt.0.content": "be brief",
                "gen_ai.prompt.1.role": "user",
                "gen_ai.prompt.1.content": "weather?",
                "gen_ai.prompt.2.role": "assistant",
                "gen_ai.prompt.2.tool_calls.0.id": "c1",
                "gen_ai.prompt.2.tool_calls.0.name": "w",
                "gen_ai.prompt.2.tool_calls.0.arguments": '{"c": "P"}',
                "gen_ai.prompt.3.role": "tool",
                "gen_ai.prompt.3.content": "sunny",
                "gen_ai.prompt.3.tool_call_id": "c1",
                "gen_ai.prompt.10.role": "user",
                "gen_ai.prompt.10.content": "index ten sorts after three",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "Sunny.",
                "gen_ai.completion.0.finish_reason": "stop",
                "llm.request.functions.0.name": "w",
                "llm.request.functions.0.description": "weather",
                "llm.request.functions.0.parameters": '{"type": "object"}',
            }
        )
    )
    assert isinstance(call, LLMCall) and call.convention == "openllmetry"
    assert [m["role"] for m in call.input_messages] == ["system", "user", "assistant", "tool", "user"]
    assert call.input_messages[2]["tool_calls"] == [{"id": "c1", "name": "w", "arguments": '{"c": "P"}'}]
    assert call.input_messages[3]["tool_call_id"] == "c1"
    assert brief(call.output_messages) == [("assistant", "Sunny.", None, [])]
    assert call.tools == [
        {
            "type": "function",
            "function": {"name": "w", "description": "weather", "parameters": {"type": "object"}},
        }
    ]
    assert (call.input_tokens, call.output_tokens, call.finish_reasons) == (30, 7, ["stop"])


def test_openllmetry_tool_workflow_span() -> None:
    tool = normalize_span(
        get_span(
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "lookup",
                "traceloop.entity.input": json.dumps({"inputs": {"id": 3}}),
                "traceloop.entity.output": json.dumps({"outputs": "found"}),
            }
        )
    )
    assert isinstance(tool, ToolCall) and (tool.name, tool.arguments, tool.result) == (
        "lookup",
        '{"id":3}',
        "found",
    )


def test_openinference_flattened_messages_parts_and_tools() -> None:
    call = normalize_openinference(
        get_span(
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "claude-x",
                "llm.provider": "anthropic",
                "llm.invocation_parameters": '{"temperature": 0.5, "model": "claude"}',
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.contents.0.message_content.type": "text",
                "llm.input_messages.0.message.contents.0.message_content.text": "part one, ",
                "llm.input_messages.0.message.contents.1.message_content.text": "part two",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "t1",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "calc",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"x": 2}',
                "llm.tools.0.tool.json_schema": json.dumps(
                    {"type": "function", "function": {"name": "calc"}}
                ),
                "llm.token_count.prompt": 11,
                "llm.token_count.completion": 4,
            }
        )
    )
    assert isinstance(call, LLMCall)
    assert brief(call.input_messages) == [("user", "part one, part two", None, [])]
    assert brief(call.output_messages) == [("assistant", None, None, [("t1", "calc", '{"x": 2}')])]
    assert call.tools == [{"type": "function", "function": {"name": "calc"}}]
    assert (call.model, call.request_model, call.params) == ("claude-x", "claude", {"temperature": 0.5})


def test_openinference_falls_back_to_raw_request_and_response() -> None:
    call = normalize_openinference(
        get_span(
            {
                "openinference.span.kind": "LLM",
                "input.value": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
                "output.value": json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": "yo"}}]}
                ),
            }
        )
    )
    assert isinstance(call, LLMCall)
    assert brief(call.input_messages + call.output_messages) == [
        ("user", "hi", None, []),
        ("assistant", "yo", None, []),
    ]
    assert normalize_openinference(get_span({"openinference.span.kind": "CHAIN"})) is None


def lf(kind: str, **attrs: Any) -> dict[str, Any]:
    return get_span(
        {"langfuse.observation.type": kind, **{f"langfuse.observation.{k}": v for k, v in attrs.items()}}
    )


def test_langfuse_generation_shapes() -> None:
    tools = [{"type": "function", "function": {"name": "w", "parameters": {}}}]
    call = normalize_langfuse(
        lf(
            "generation",
            input=json.dumps({"messages": [{"role": "user", "content": "q"}], "tools": tools}),
            output=json.dumps({"role": "assistant", "content": "a"}),
            **{
                "model.name": "gpt-x",
                "usage_details": json.dumps({"input": 5, "output": 6}),
                "model.parameters": json.dumps({"temperature": 0}),
            },
        )
    )
    assert isinstance(call, LLMCall)
    assert brief(call.input_messages + call.output_messages) == [
        ("user", "q", None, []),
        ("assistant", "a", None, []),
    ]
    assert call.tools == tools and (call.model, call.input_tokens, call.output_tokens) == ("gpt-x", 5, 6)

    # A bare prompt string and arbitrary JSON output are kept as text, never dropped.
    odd = normalize_langfuse(
        lf(
            "generation",
            input="plain prompt",
            output=json.dumps({"score": 3}),
            level="ERROR",
            status_message="rate limited",
        )
    )
    assert isinstance(odd, LLMCall)
    assert brief(odd.input_messages + odd.output_messages) == [
        ("user", "plain prompt", None, []),
        ("assistant", '{"score": 3}', None, []),
    ]
    assert odd.error == "rate limited"

    choices = normalize_langfuse(
        lf("generation", output=json.dumps({"choices": [{"message": {"role": "assistant", "content": "c"}}]}))
    )
    assert isinstance(choices, LLMCall) and brief(choices.output_messages) == [("assistant", "c", None, [])]


def test_langfuse_tool_and_other_types() -> None:
    tool = normalize_span(
        lf("tool", input='{"city": "Oslo"}', output='"cold"', **{"metadata.tool_call_id": '"c7"'})
    )
    assert isinstance(tool, ToolCall) and (tool.call_id, tool.arguments, tool.result) == (
        "c7",
        '{"city": "Oslo"}',
        "cold",
    )
    assert normalize_span(lf("span", input='"x"')) is None
