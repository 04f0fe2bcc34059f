"""Span dicts for the normalisers' tests (`get_span`: attributes, events, anything else) and the
normalised messages in brief (role, content, tool call id, tool calls).
"""

from __future__ import annotations

from typing import Any


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
