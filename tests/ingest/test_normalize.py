"""Normalisers: one span -> one LLM call or tool call, for every convention and its odd corners."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ingest.assembly.normalize import HistoryMemo, LLMCall, ToolCall, normalize_span
from ingest.assembly.normalize.genai import normalize_genai
from ingest.assembly.normalize.langfuse import normalize_langfuse
from ingest.assembly.normalize.openinference import normalize_openinference
from ingest.assembly.normalize.openllmetry import normalize_openllmetry
from ingest.assembly.normalize.types import openai_tools


def get_span(
    attributes: dict[str, Any], events: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "trace_id": "t" * 32,
        "span_id": "s" * 16,
        "name": "x",
        "attributes": attributes,
        "events": events or [],
        **extra,
    }


def brief(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["role"],
            m["content"],
            m["tool_call_id"],
            [(c["id"], c["name"], c["arguments"]) for c in m["tool_calls"]],
        )
        for m in messages
    ]


def test_genai_parts_with_system_instructions_tool_results_and_odd_parts() -> None:
    call = normalize_genai(
        get_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4",
                "gen_ai.response.model": "gpt-4-0613",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.temperature": 0.2,
                "gen_ai.request.max_tokens": 64,
                "gen_ai.usage.input_tokens": 97,
                "gen_ai.usage.output_tokens": 52,
                "gen_ai.response.finish_reasons": ["stop"],
                "gen_ai.system_instructions": json.dumps(
                    [{"type": "text", "content": "You are a weather bot."}]
                ),
                "gen_ai.input.messages": json.dumps(
                    [
                        {
                            "role": "user",
                            "parts": [
                                {"type": "text", "content": "Weather in Paris?"},
                                {"type": "uri", "modality": "image", "uri": "https://x/y.png"},
                            ],
                        },
                        {
                            "role": "assistant",
                            "parts": [
                                {"type": "reasoning", "content": "think"},
                                {
                                    "type": "tool_call",
                                    "id": "call_VSPy",
                                    "name": "get_weather",
                                    "arguments": {"location": "Paris"},
                                },
                            ],
                        },
                        # The registry's example: `result` instead of `response`, and a stray leading space in the id.
                        {
                            "role": "tool",
                            "parts": [
                                {"type": "tool_call_response", "id": " call_VSPy", "result": "rainy, 57°F"}
                            ],
                        },
                    ]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "Rainy, 57°F."}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            }
        )
    )
    assert isinstance(call, LLMCall)
    assert brief(call.input_messages) == [
        ("system", "You are a weather bot.", None, []),
        ("user", 'Weather in Paris?{"type":"uri","modality":"image","uri":"https://x/y.png"}', None, []),
        ("assistant", None, None, [("call_VSPy", "get_weather", '{"location":"Paris"}')]),
        ("tool", "rainy, 57°F", "call_VSPy", []),
    ]
    assert brief(call.output_messages) == [("assistant", "Rainy, 57°F.", None, [])]
    assert (call.model, call.provider, call.input_tokens, call.output_tokens) == (
        "gpt-4-0613",
        "openai",
        97,
        52,
    )
    assert call.params == {"temperature": 0.2, "max_tokens": 64} and call.has_content


def test_genai_without_content_is_still_a_call_marked_contentless() -> None:
    call = normalize_span(
        get_span(
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 3}
        )
    )
    assert isinstance(call, LLMCall) and not call.has_content and call.input_tokens == 3


def test_genai_deprecated_events_from_logs_rebuild_the_messages() -> None:
    def event(name: str, body: dict[str, Any], t: int) -> dict[str, Any]:
        return {"name": name, "time": t, "attributes": {"gen_ai.system": "openai", "log.body": body}}

    call = normalize_span(
        get_span(
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
            events=[
                event(
                    "gen_ai.choice",
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant"},
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"a": 1}'},
                            }
                        ],
                    },
                    5,
                ),
                event("gen_ai.system.message", {"content": "sys"}, 1),
                event("gen_ai.user.message", {"content": "hi"}, 2),
                event(
                    "gen_ai.assistant.message",
                    {
                        "content": None,
                        "tool_calls": [
                            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                    3,
                ),
                event("gen_ai.tool.message", {"content": "done", "id": "c0"}, 4),
            ],
        )
    )
    assert isinstance(call, LLMCall) and call.has_content
    assert brief(call.input_messages) == [
        ("system", "sys", None, []),
        ("user", "hi", None, []),
        ("assistant", None, None, [("c0", "f", "{}")]),
        ("tool", "done", "c0", []),
    ]
    assert brief(call.output_messages) == [("assistant", None, None, [("c1", "f", '{"a": 1}')])]


def test_genai_tool_span() -> None:
    tool = normalize_span(
        get_span(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "search",
                "gen_ai.tool.call.id": "c9",
                "gen_ai.tool.call.arguments": '{"q": "x"}',
                "gen_ai.tool.call.result": '{"hits": 0}',
                "error.type": "TimeoutError",
            }
        )
    )
    assert isinstance(tool, ToolCall)
    assert (tool.name, tool.call_id, tool.arguments, tool.result, tool.error) == (
        "search",
        "c9",
        '{"q": "x"}',
        '{"hits": 0}',
        "TimeoutError",
    )


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


def test_plain_spans_are_neither() -> None:
    assert normalize_span(get_span({"http.method": "GET"})) is None


def test_history_memo_converts_what_a_trace_repeats_once() -> None:
    """A chat span's history is the previous span's plus new turns: the answer the model gave (with
    its `finish_reason`) comes back in the next history as the very same message, the history's
    prefix is the previous call's messages, and nothing is shared between traces (one memo each)."""
    system = {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    user = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}
    follow_up = {"role": "user", "parts": [{"type": "text", "content": "Thanks"}]}

    def chat(history: list[dict[str, Any]], output: dict[str, Any]) -> dict[str, Any]:
        return get_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([{**output, "finish_reason": "stop"}]),
            }
        )

    memo = HistoryMemo()
    first = normalize_span(chat([system, user], answer), memo)
    second = normalize_span(chat([system, user, answer, follow_up], answer), memo)
    assert isinstance(first, LLMCall) and isinstance(second, LLMCall)
    assert [(m["role"], m["content"]) for m in second.input_messages] == [
        ("system", "Be brief."),
        ("user", "Weather in Paris?"),
        ("assistant", "Sunny."),
        ("user", "Thanks"),
    ]
    assert second.input_messages[2] is first.output_messages[0]  # the answer, converted once
    assert all(a is b for a, b in zip(second.input_messages[:2], first.input_messages, strict=True))
    other_trace = normalize_span(chat([system, user], answer), HistoryMemo())
    assert isinstance(other_trace, LLMCall)
    assert other_trace.input_messages == first.input_messages
    assert other_trace.input_messages[0] is not first.input_messages[0]


def test_history_memo_shares_an_answer_by_value_and_nothing_else() -> None:
    """The history's copy of the answer is recognised by value (its keys in another order, no
    `finish_reason`); a turn that differs from the answer in any way is converted on its own."""
    system = {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}
    reordered = {"parts": [{"content": "Sunny.", "type": "text"}], "role": "assistant"}
    edited = {"role": "assistant", "parts": [{"type": "text", "content": "Sunny!"}]}

    def chat(history: list[dict[str, Any]]) -> dict[str, Any]:
        return get_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([{**answer, "finish_reason": "stop"}]),
            }
        )

    memo = HistoryMemo()
    first = normalize_span(chat([system]), memo)
    second = normalize_span(chat([system, reordered]), memo)
    third = normalize_span(chat([system, reordered, edited]), memo)
    assert isinstance(first, LLMCall) and isinstance(second, LLMCall) and isinstance(third, LLMCall)
    assert second.input_messages[1] is first.output_messages[0]
    assert third.input_messages[2] is not third.output_messages[0]
    assert third.input_messages[2]["content"] == "Sunny!" and third.output_messages[0]["content"] == "Sunny."


# One LLM span and one tool span per convention: every normaliser builds its calls from the span
# (`SpanCall`), so each keeps the span's ids and times under its own convention name.
_ONE_OF_EACH = [
    ("genai", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": '[{"role":"user","content":"hi"}]'}),
    ("genai", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather"}),
    ("openinference", {"openinference.span.kind": "LLM", "llm.input_messages.0.message.content": "hi"}),
    ("openinference", {"openinference.span.kind": "TOOL", "tool.name": "weather"}),
    ("openllmetry", {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"}),
    ("openllmetry", {"traceloop.span.kind": "tool", "traceloop.entity.name": "weather"}),
    ("langfuse", {"langfuse.observation.type": "generation", "langfuse.observation.input": '"hi"'}),
    ("langfuse", {"langfuse.observation.type": "tool"}),
    ("vercel", {"ai.operationId": "ai.generateText.doGenerate", "ai.prompt.messages": '"hi"'}),
    ("vercel", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "weather"}),
]


@pytest.mark.parametrize(("convention", "attributes"), _ONE_OF_EACH)
def test_every_call_keeps_its_spans_ids_and_times(convention: str, attributes: dict[str, Any]) -> None:
    call = normalize_span(get_span(attributes, start_time=1_000, end_time=2_000))
    assert call is not None
    assert (call.span_id, call.trace_id, call.convention, call.start_time, call.end_time) == (
        "s" * 16,
        "t" * 32,
        convention,
        1_000,
        2_000,
    )
    if isinstance(call, LLMCall):  # content is what the messages say, never set on its own
        assert call.has_content == bool(call.input_messages or call.output_messages)


def test_openai_tools_keeps_the_readable_definitions_of_a_list_only() -> None:
    weather = {"name": "weather", "parameters": {"type": "object"}}
    assert openai_tools([weather, {"description": "no name"}, "not json"]) == [
        {"type": "function", "function": weather}
    ]
    assert openai_tools({"tools": [weather]}) == openai_tools(None) == openai_tools(5) == []
