"""GenAI message shapes as lake messages: `{role, parts[]}` items (the semantic conventions'
`gen_ai.input.messages` / `gen_ai.output.messages`), OpenAI-style chat messages, and system
instructions; and `HistoryMemo`, which parses the history a trace's chat spans repeat once.

Tool results are `tool_call_response` parts keyed `response` in the JSON schema and
`result` in the registry's example; both are accepted.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from ingest.assembly.normalize.types import (
    Message,
    as_text,
    make_message,
    make_tool_call,
    maybe_json,
    strip_or_none,
    text_or_none,
)


def messages_from_parts(
    raw: Any, *, default_role: str = "user", memo: HistoryMemo | None = None
) -> list[Message]:
    """`[{role, parts[]}]` (JSON text or list) as lake messages; tool responses become tool messages.
    `memo`: the trace's `HistoryMemo`, which hands back the messages of an answer it has seen."""
    if isinstance(raw, str):
        raw = maybe_json(raw)
    if not isinstance(raw, list):
        return [make_message(default_role, as_text(raw))] if raw not in (None, "") else []
    out: list[Message] = []
    for item in raw:
        if isinstance(item, dict):
            out += memo.convert(item, default_role) if memo is not None else _convert_item(item, default_role)
    return out


class HistoryMemo:
    """What one trace's chat spans repeat, converted once. Every chat span repeats the conversation
    so far: a span whose history text is the previous span's plus new turns (the usual case:
    instrumentations serialise the same list the same way) parses and converts only the new turns,
    and the first of those is usually the answer the previous span gave, whose messages are handed
    back: the model's answer and the next call's copy of it in the history are one message object,
    which the conversation recognises at once. One per trace, used in time order."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.messages: list[Message] = []
        # The last answer's items (without their `finish_reason`, no part of a message) and their
        # messages. Nothing downstream changes the messages (a conversation copies one to change it).
        self.answer: list[tuple[dict[str, Any], list[Message]]] = []

    def messages_of(self, raw: Any) -> list[Message]:
        """The messages of a span's history (`gen_ai.input.messages`, JSON text or parsed)."""
        if not isinstance(raw, str):
            return messages_from_parts(raw, memo=self)
        previous = self.text
        if previous == raw:
            return self.messages
        messages: list[Message] | None = None
        if previous and previous[-1:] == "]" and len(raw) > len(previous):
            cut = len(previous) - 1
            if raw[cut] == "," and raw.startswith(previous[:cut]):
                try:
                    tail = orjson.loads("[" + raw[cut + 1 :])
                except orjson.JSONDecodeError:
                    tail = None
                if isinstance(tail, list):
                    messages = self.messages + messages_from_parts(tail, memo=self)
        if messages is None:
            messages = messages_from_parts(raw, memo=self)
        self.text, self.messages = raw, messages
        return messages

    def answer_of(self, raw: Any) -> list[Message]:
        """The messages of a span's answer (`gen_ai.output.messages`, parsed), remembered for the
        next history."""
        if not isinstance(raw, list):
            self.answer = []
            return messages_from_parts(raw, default_role="assistant")
        answer: list[tuple[dict[str, Any], list[Message]]] = []
        out: list[Message] = []
        for item in raw:
            if isinstance(item, dict):
                messages = self.convert(item, "assistant")
                if item.get("role"):  # an item without one converts by the default role: not the history's
                    answer.append(
                        (_without_finish_reason(item) if "finish_reason" in item else item, messages)
                    )
                out += messages
        self.answer = answer
        return out

    def convert(self, item: dict[str, Any], default_role: str) -> list[Message]:
        """`_convert_item`, or the messages of the last answer when the item is one of its items
        (compared by value: a walk in C that stops at the first difference and allocates nothing)."""
        for seen, messages in self.answer:
            if item == seen:
                return messages
        return _convert_item(item, default_role)


def _without_finish_reason(item: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in item.items() if name != "finish_reason"}


def _convert_item(item: dict[str, Any], default_role: str) -> list[Message]:
    role = str(item.get("role") or default_role)
    parts = item.get("parts")
    if parts is None and "content" in item:  # OpenAI-style message in a semconv slot
        return messages_from_openai([item])
    out: list[Message] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            calls.append(make_tool_call(part.get("id"), part.get("name"), part.get("arguments")))
        elif kind == "tool_call_response":
            response = part.get("response", part.get("result"))
            out.append(make_message("tool", as_text(response), tool_call_id=strip_or_none(part.get("id"))))
        elif kind == "refusal":  # OpenLLMetry's own part type
            texts.append(str(part.get("content", "")))
        elif kind != "reasoning":  # blobs, files, uris, server tools: kept as JSON, not lost
            texts.append(json.dumps(part, ensure_ascii=False, separators=(",", ":")))
    if texts or calls:
        content = "".join(texts) if texts else None
        out.append(make_message(role, content, name=item.get("name"), tool_calls=calls))
    return out


def messages_from_openai(raw: Any) -> list[Message]:
    """OpenAI chat messages (`{role, content, tool_calls, tool_call_id}`, JSON text, a list or one)
    as lake messages: each item by `store.messages.from_openai`'s rule (this is its compiled twin,
    held to it by tests/ingest/test_message_rules.py)."""
    raw = maybe_json(raw)
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    out: list[Message] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        calls = []
        for call in item.get("tool_calls") or []:
            if isinstance(call, dict):
                fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
                calls.append(make_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
        out.append(
            make_message(
                str(item.get("role") or "user"),
                as_text(item.get("content")),
                name=text_or_none(item.get("name")),
                tool_call_id=strip_or_none(
                    item.get("tool_call_id") or (item.get("id") if item.get("role") == "tool" else None)
                ),
                tool_calls=calls,
                is_error=is_error if isinstance(is_error := item.get("is_error"), bool) else None,
            )
        )
    return out


def system_messages(raw: Any) -> list[Message]:
    raw = maybe_json(raw)
    if raw in (None, "", []):
        return []
    if isinstance(raw, list):
        texts = [
            str(p.get("content", "")) for p in raw if isinstance(p, dict) and p.get("type", "text") == "text"
        ]
        return [make_message("system", "".join(texts))] if texts else []
    return [make_message("system", as_text(raw))]
