"""The GenAI semantic conventions' normaliser: messages as parts with system instructions and tool
results, no content, the deprecated per-message events, tool spans.
"""

from __future__ import annotations

import json
from typing import Any

from ingest.assembly.normalize import LLMCall, ToolCall, normalize_span
from ingest.assembly.normalize.genai import normalize_genai
from tests.ingest.assembly.normalize.normalize_spans import brief, get_span


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
