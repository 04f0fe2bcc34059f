"""The lake's message struct as Python builds it: `trajectories.messages` and `scenarios.messages`
(`store.schema.MESSAGE`), one builder for every package that writes messages.

Messages are plain dicts (what Arrow's `from_pylist` takes and `to_pylist` gives back) with
every field of the struct present, so a row never depends on Arrow filling a missing key.
"""

from __future__ import annotations

from typing import Any


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
