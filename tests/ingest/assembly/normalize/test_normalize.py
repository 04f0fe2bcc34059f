"""Normalisers: one span -> one LLM call or tool call, for every convention and its odd corners.

Here what they share: plain spans are neither, the history memo, each call keeps its span's ids
and times, `openai_tools`. Each convention's own shapes: `test_normalize_genai.py` and
`test_normalize_libraries.py`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ingest.assembly.normalize import HistoryMemo, LLMCall, normalize_span
from ingest.assembly.normalize.types import openai_tools
from tests.ingest.assembly.normalize.normalize_spans import get_span


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
