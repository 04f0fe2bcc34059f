"""The scripted weather agent's fixed content and how a request shows which turn it is.

The model, question, tool call (name, id, arguments, result), final answer and per-turn token
usage (`USAGE`) that `scripted_llm.py` answers with, and that `capture.py` and
`make_expected.py` write into a recording's manifest and expectations; and the checks on a
request body (is a tool result in it, does it offer a `final_answer` tool) that pick the turn.
"""

from __future__ import annotations

import json
from typing import Any

MODEL = "gpt-4o-mini-2024-07-18"
QUESTION = "What is the weather in Paris?"
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Get the current weather for a city."
TOOL_CALL_ID = "call_weather_paris_1"  # the id the model gives its tool call (chat and Responses)
TOOL_ITEM_ID = "fc_weather_paris_1"  # the Responses API output item id of that call
TOOL_ARGUMENTS = '{"city": "Paris"}'
TOOL_RESULT = "18C and sunny in Paris"
FINAL_ANSWER = "It is 18C and sunny in Paris."
SYSTEM_PROMPT = "You are a weather assistant. Use the get_weather tool to answer."
USAGE = [(40, 12), (70, 9)]  # (input, output) tokens of turn 1 (tool call) and turn 2 (answer)
INPUT_TOKENS = sum(u[0] for u in USAGE)
OUTPUT_TOKENS = sum(u[1] for u in USAGE)
TOOL_ERROR_TEXT = (
    "weather service unavailable"  # what the tool raises in a failing run (agents/corpus_common.py)
)
ERROR_MESSAGE = "The scripted model failed on purpose (failing run)."
# Frameworks that end a run only through a `final_answer` tool (smolagents) get the answer as
# that tool's call on turn 2, when they offer it.
FINAL_TOOL = "final_answer"
FINAL_CALL_ID = "call_final_answer_1"


def _offers_final_tool(body: dict[str, Any]) -> bool:
    for tool in body.get("tools") or []:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if name == FINAL_TOOL:
            return True
    return False


def _has_tool_result_chat(body: dict[str, Any]) -> bool:
    # Frameworks that send the tool result back as plain text (smolagents: a user message
    # "Observation: ...") are recognised by the result text itself.
    if TOOL_RESULT in json.dumps(body.get("messages") or []):
        return True
    for message in body.get("messages") or []:
        if message.get("role") in ("tool", "function"):
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") in ("tool_result", "function_call_output") for p in content
        ):
            return True
    return False


def _has_tool_result_responses(body: dict[str, Any]) -> bool:
    if TOOL_RESULT in json.dumps(body.get("input") or []):
        return True
    items = body.get("input")
    if not isinstance(items, list):
        return False
    return any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
