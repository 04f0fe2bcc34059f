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
)


def messages_from_parts(
    raw: Any, *, default_role: str = "user", items: ItemCache | None = None
) -> list[Message]:
    """`[{role, parts[]}]` (JSON text or list) as lake messages; tool responses become tool messages.
    `items`: a trace's converted items (`HistoryMemo.items`), to convert each repeated item once."""
    if isinstance(raw, str):
        raw = maybe_json(raw)
    if not isinstance(raw, list):
        return [make_message(default_role, as_text(raw))] if raw not in (None, "") else []
    out: list[Message] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        if items is None:
            out += _convert_item(item, default_role)
            continue
        # Looked up here: a call per item costs as much as the lookup. An item that names its role
        # converts the same as input or output, and an output's `finish_reason` is no part of the
        # message: the model's answer and the next call's copy of it in the history are one message
        # object (the conversation knows it at once).
        try:
            text = orjson.dumps(_without_finish_reason(item) if "finish_reason" in item else item)
        except (TypeError, orjson.JSONEncodeError):  # values orjson cannot write: converted each time
            out += _convert_item(item, default_role)
            continue
        key = text if item.get("role") else (text, default_role)
        found = items.get(key)
        if found is None:
            found = items[key] = _convert_item(item, default_role)
        out += found
    return out


def _without_finish_reason(item: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in item.items() if name != "finish_reason"}


# A trace's converted message items by their JSON text (and the default role, for an item without
# one). The messages are shared by every call that repeats them, and nothing downstream changes
# them (a conversation copies a message before it changes it).
ItemCache = dict[bytes | tuple[bytes, str], list[Message]]


class HistoryMemo:
    """What one trace's chat spans repeat, parsed once. Every chat span repeats the conversation so
    far: a span whose history text is the previous span's plus new turns (the usual case:
    instrumentations serialise the same list the same way) parses and converts only the new turns,
    and an item seen before (an earlier answer, now in the history) is converted once (`items`).
    One per trace, used in time order."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.messages: list[Message] = []
        self.items: ItemCache = {}

    def messages_of(self, raw: Any) -> list[Message]:
        if not isinstance(raw, str):
            return messages_from_parts(raw, items=self.items)
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
                    messages = self.messages + messages_from_parts(tail, items=self.items)
        if messages is None:
            messages = messages_from_parts(raw, items=self.items)
        self.text, self.messages = raw, messages
        return messages


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
    """OpenAI chat messages (`{role, content, tool_calls, tool_call_id}`) as lake messages."""
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
                name=item.get("name"),
                tool_call_id=strip_or_none(
                    item.get("tool_call_id") or (item.get("id") if item.get("role") == "tool" else None)
                ),
                tool_calls=calls,
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
