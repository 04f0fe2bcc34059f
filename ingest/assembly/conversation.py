"""Merge the normalised calls of one agent run into one conversation.

Every chat span repeats the whole history it was given, so the conversation is rebuilt
by appending, for each LLM call in time order, only the input messages not already
seen, then its outputs. "Already seen" is decided on a message key (role + content; the
call ids for tool calls and tool results) and first by the longest common prefix with
the conversation so far, so a user who says "ok" twice is not collapsed to one
message, while a call that re-sends history in a different window (no system prompt,
a truncated prefix) does not duplicate it. Tool spans add the tool's result when the
next chat span does not carry it (or before it arrives) and mark failed results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ingest.assembly.normalize.types import LLMCall, Message, ToolCall, make_message

Key = tuple[Any, ...]


def message_key(message: Message) -> Key:
    role = message.get("role")
    if role == "tool" and message.get("tool_call_id"):
        return ("tool", message["tool_call_id"])
    calls = message.get("tool_calls") or []
    if calls:
        ids = tuple(c.get("id") or f"{c.get('name')}:{c.get('arguments')}" for c in calls)
        return (role, "calls", ids)
    return (role, (message.get("content") or "").strip())


def _common_prefix(a: list[Key], b: list[Key]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Conversation:
    """An append-only conversation with the dedup rules above."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.keys: list[Key] = []

    def _append(self, message: Message) -> None:
        self.messages.append(dict(message))
        self.keys.append(message_key(message))

    def add_input(self, messages: Iterable[Message]) -> None:
        incoming = list(messages)
        keys = [message_key(m) for m in incoming]
        start = _common_prefix(keys, self.keys)
        unmatched = set(self.keys[start:])
        for message, key in zip(incoming[start:], keys[start:], strict=True):
            if key in unmatched:
                self._merge(key, message)
                continue
            self._append(message)

    def add_output(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self._append(message)

    def _merge(self, key: Key, message: Message) -> None:
        # The same message seen again (e.g. a tool result from both a tool span and the next
        # chat span): fill in what the earlier copy lacked, keep the earlier position.
        for existing, existing_key in zip(self.messages, self.keys, strict=True):
            if existing_key == key:
                for field in ("name", "content"):
                    if existing.get(field) in (None, "") and message.get(field):
                        existing[field] = message[field]
                if message.get("is_error"):
                    existing["is_error"] = True
                return

    def add_tool_result(self, tool: ToolCall) -> None:
        call_id = tool.call_id or self._pending_call_id(tool.name)
        message = make_message(
            "tool",
            tool.result if tool.result is not None else tool.error,
            name=tool.name,
            tool_call_id=call_id,
            is_error=tool.is_error,
        )
        key = message_key(message)
        if call_id and key in self.keys:
            self._merge(key, message)
        elif call_id or tool.result is not None:
            self._append(message)

    def _pending_call_id(self, name: str | None) -> str | None:
        answered = {m.get("tool_call_id") for m in self.messages if m.get("role") == "tool"}
        for message in reversed(self.messages):
            for call in message.get("tool_calls") or []:
                if (
                    call.get("id")
                    and call["id"] not in answered
                    and (name is None or call.get("name") == name)
                ):
                    return str(call["id"])
        return None

    def finish(self) -> list[Message]:
        """The messages with tool names filled in from their calls and `is_error` always set."""
        names = {
            c.get("id"): c.get("name")
            for m in self.messages
            for c in m.get("tool_calls") or []
            if c.get("id")
        }
        out = []
        for message in self.messages:
            message = dict(message)
            if message.get("role") == "tool" and not message.get("name"):
                message["name"] = names.get(message.get("tool_call_id"))
            message["is_error"] = bool(message.get("is_error"))
            message["tool_calls"] = list(message.get("tool_calls") or [])
            out.append(message)
        return out


def build_conversation(calls: Iterable[LLMCall | ToolCall]) -> list[Message]:
    """One conversation from LLM and tool calls already sorted in time order."""
    conversation = Conversation()
    for call in calls:
        if isinstance(call, LLMCall):
            conversation.add_input(call.input_messages)
            conversation.add_output(call.output_messages)
        else:
            conversation.add_tool_result(call)
    return conversation.finish()


def final_output(messages: list[Message]) -> str | None:
    """The last assistant text that is not a tool call: the agent's answer."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content") and not message.get("tool_calls"):
            return str(message["content"])
    return None
