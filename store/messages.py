"""The lake's message struct as Python builds it: `trajectories.messages` and `scenarios.messages`
(`store.schema.MESSAGE`), one builder for every package that writes messages, and the one rule by
which an OpenAI chat message becomes a lake message (`from_openai`).

Messages are plain dicts (what Arrow's `from_pylist` takes and `to_pylist` gives back) with
every field of the struct present, so a row never depends on Arrow filling a missing key.

The assembler (`ingest.assembly.normalize`, compiled with mypyc, where a call into interpreted
code per message would cost) keeps compiled twins of `lake_message` and `from_openai`;
tests/ingest/assembly/normalize/test_message_rules.py holds each twin to this module's output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

# Framework roles as the model API received them: smolagents sends its `tool-call` steps as
# assistant turns and `tool-response` steps as user turns; LangChain says human/ai; Gemini, model.
ROLE_ALIASES: dict[str, str] = {
    "tool-call": "assistant",
    "tool-response": "user",
    "human": "user",
    "ai": "assistant",
    "model": "assistant",
    "developer": "system",
}


def lake_message(
    role: str | None,
    content: str | None = None,
    *,
    name: str | None = None,
    tool_call_id: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    is_error: bool | None = None,
) -> dict[str, Any]:
    """A message in the lake's struct shape (`store.schema.MESSAGE`), every field present;
    `tool_calls` are `lake_tool_call`s, `is_error` says whether a tool result is a failure.

    >>> lake_message("user", "Hi")
    {'role': 'user', 'content': 'Hi', 'name': None, 'tool_call_id': None, 'tool_calls': [], 'is_error': None}
    """
    return {
        "role": role,
        "content": content,
        "name": name,
        "tool_call_id": tool_call_id,
        "tool_calls": list(tool_calls or []),
        "is_error": is_error,
    }


def lake_tool_call(call_id: str | None, name: str | None, arguments: str | None) -> dict[str, Any]:
    """A tool call in the lake's struct shape (`store.schema.TOOL_CALL`); `arguments` is JSON text,
    exactly as the model produced it.

    >>> lake_tool_call("call_1", "add", '{"a": 1}')
    {'id': 'call_1', 'name': 'add', 'arguments': '{"a": 1}'}
    """
    return {"id": call_id, "name": name, "arguments": arguments}


def from_openai(message: Mapping[str, Any], *, default_role: str = "user") -> dict[str, Any]:
    """An OpenAI chat message (`{role, content, name, tool_call_id, tool_calls}`), or a lake
    message, as a lake message: framework roles mapped (`ROLE_ALIASES`), content as text
    (`content_text`), a tool call's `function.name`/`function.arguments` (or the lake's flat
    `name`/`arguments`) with the arguments as JSON text, names as text, ids trimmed (`an_id`), a tool
    result's id from `id` when it has no `tool_call_id`, and a lake message's `is_error` kept
    (when it is a bool).

    >>> from_openai({"role": "ai", "content": [{"type": "text", "text": "4"}],
    ...              "tool_calls": [{"id": " c1", "function": {"name": "add", "arguments": {"a": 1}}}]})
    {'role': 'assistant', 'content': '4', 'name': None, 'tool_call_id': None, 'tool_calls': [{'id': 'c1', 'name': 'add', 'arguments': '{"a":1}'}], 'is_error': None}
    """
    calls = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            fn = call["function"] if isinstance(call.get("function"), Mapping) else call
            calls.append(
                lake_tool_call(
                    an_id(call.get("id")), text_or_none(fn.get("name")), json_text(fn.get("arguments"))
                )
            )
    role = str(message.get("role") or default_role)
    call_id = message.get("tool_call_id") or (message.get("id") if role == "tool" else None)
    return lake_message(
        ROLE_ALIASES.get(role, role),
        content_text(message.get("content")),
        name=text_or_none(message.get("name")),
        tool_call_id=an_id(call_id),
        tool_calls=calls,
        is_error=is_error if isinstance(is_error := message.get("is_error"), bool) else None,
    )


def content_text(value: Any) -> str | None:
    """Message content as text: strings stay, a list of text parts is joined, anything else
    (structured tool results, non-text parts) is JSON as Python frameworks render it for the
    model (`json.dumps`), so nothing is lost.

    >>> content_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), content_text({"x": 1})
    ('ab', '{"x": 1}')
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [p.get("text", p.get("content")) for p in value if isinstance(p, dict)]
        strings = [t for t in texts if isinstance(t, str)]
        if strings and len(strings) == len(value):
            return "".join(strings)
    return json.dumps(value, ensure_ascii=False)


def json_text(value: Any) -> str | None:
    """Tool-call arguments as JSON text: a string is kept exactly as the model produced it,
    anything else is dumped compactly; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits, NaN kept as NaN
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def text_or_none(value: Any) -> str | None:
    """A name as text (a number too), or None."""
    return value if value is None or isinstance(value, str) else str(value)


def an_id(value: Any) -> str | None:
    """An id as trimmed text, or None when absent: the GenAI registry's own example has a stray
    leading space in a tool-call id, and google-adk writes `<not specified>` when it has none."""
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith("<") and text.endswith(">"):
        return None
    return text or None
