"""Merge the normalised calls of one agent run into one conversation: what the model was sent.

Every chat span repeats the history it was given, so the conversation is rebuilt by
appending, for each LLM call in time order, only the input messages not already seen,
then its outputs. "Already seen" is decided on a message key (role + content; the call
ids for tool calls and tool results), first by the longest common prefix with the
conversation so far, so a user who says "ok" twice is not collapsed to one message,
while a call that re-sends history in a different window does not duplicate it.

Sources of truth, in order:

- an LLM call's input messages are what the model was sent: a tool result the next call
  carries replaces what the tool span recorded (a serialized framework object, say), and a
  tool span's result that the next call's input does not carry at all is dropped (the
  framework showed it to the model some other way, e.g. as a user "Observation:");
- the model's own outputs stand for its turns: when a later input renders an assistant
  turn differently (a tool call re-written as text), the structured output stays;
- tool spans fill only what LLM spans lack: the result of a tool when no later call shows
  the model its input (content-free telemetry, or the run ending on a failed tool), and the
  tool call itself on a content-free model turn. A successful tool after the model's last
  turn whose result is the agent's own output is how the agent answered (`tool_output`),
  not a message the model saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ingest.assembly.normalize.types import LLMCall, Message, ToolCall, make_message, make_tool_call

Key = tuple[Any, ...]

# Where a message came from: an LLM call's input or output, or a tool span.
INPUT, OUTPUT, TOOL_SPAN = "input", "output", "tool_span"


def message_key(message: Message) -> Key:
    role = message.get("role")
    if role == "tool" and message.get("tool_call_id"):
        return ("tool", message["tool_call_id"])
    calls = message.get("tool_calls") or []
    if calls:
        ids = tuple([c.get("id") or f"{c.get('name')}:{c.get('arguments')}" for c in calls])
        return (role, "calls", ids)
    return (role, (message.get("content") or "").strip())


@dataclass(slots=True, init=False)  # the `__init__`s are written out: see `LLMCall`
class _Entry:
    message: Message
    key: Key
    origin: str
    placeholder: bool  # a content-free model turn: its structure only
    merged: int  # id of the last input message merged into it (the same one comes back span after span)

    def __init__(self, message: Message, key: Key, origin: str, placeholder: bool = False) -> None:
        self.message, self.key, self.origin, self.placeholder = message, key, origin, placeholder
        self.merged = 0


@dataclass(slots=True, init=False)
class Conversation:
    """An append-only conversation with the rules above."""

    entries: list[_Entry]
    tool_output: str | None  # the result of a successful tool after the model's last turn
    # Where the tool-span results since the last LLM call are in `entries` (only appended to until then).
    _fresh_tools: list[int]
    # Message keys by message identity: the normalisers hand the same message objects to every
    # call that repeats them, and those objects live as long as the conversation is built.
    _keys_of: dict[int, Key]

    def __init__(self) -> None:
        self.entries, self.tool_output, self._fresh_tools, self._keys_of = [], None, [], {}

    @property
    def keys(self) -> list[Key]:
        return [e.key for e in self.entries]

    def _key(self, message: Message) -> Key:
        key = self._keys_of.get(id(message))
        if key is None:
            key = self._keys_of[id(message)] = message_key(message)
        return key

    def _append(
        self, message: Message, origin: str, *, placeholder: bool = False, key: Key | None = None
    ) -> _Entry:
        # A message made here (a tool span's, a placeholder) comes with its `key`: its id must not
        # be remembered, a later message may take over the address once it is freed.
        entry = _Entry(dict(message), key or self._key(message), origin, placeholder)
        if key is None:
            # A call's own message (alive while the conversation is built): merging it into its own
            # copy would change nothing, so it counts as merged already (`_add_input` skips it).
            entry.merged = id(message)
        self.entries.append(entry)
        return entry

    def add_call(self, call: LLMCall) -> None:
        if call.input_messages:
            self._add_input(call.input_messages)
        self._fresh_tools = []
        if call.output_messages:
            for message in call.output_messages:
                self._append(message, OUTPUT)
        elif not call.has_content:
            placeholder = make_message("assistant")
            self._append(placeholder, OUTPUT, placeholder=True, key=message_key(placeholder))

    def _add_input(self, incoming: list[Message]) -> None:
        keys_of = self._keys_of
        entries = self.entries
        start = 0  # the common prefix of the input and the conversation so far, merged as it goes
        for entry, message in zip(entries, incoming, strict=False):
            # Every call repeats the whole history, mostly the very messages merged last time: an
            # entry that merged this message has its key (an entry's key changes only when it is
            # reset, `_attach_to_placeholder`), and nothing is left to merge.
            if entry.merged == id(message):
                start += 1
                continue
            # `_key` inlined (keys are non-empty tuples).
            if entry.key != (keys_of.get(id(message)) or self._key(message)):
                break
            self._merge(entry, message)
            start += 1
        if start == len(incoming):
            return  # all of it is the conversation so far: nothing to add, no fresh tool passed over
        matched = set(range(start))  # positions in `entries` this input covers
        cursor = start
        for message in incoming[start:]:
            key = keys_of.get(id(message)) or self._key(message)
            found = None
            for i in range(start, len(entries)):
                if entries[i].key == key and i not in matched:
                    found = i
                    break
            if found is not None:
                self._merge(entries[found], message)
                matched.add(found)
                cursor = found + 1
                continue
            if (
                cursor < len(entries)
                and cursor not in matched
                and entries[cursor].origin == OUTPUT
                and entries[cursor].message.get("role") == message.get("role")
            ):
                matched.add(cursor)  # the model's own turn, rendered differently in this input
                cursor += 1
                continue
            self._append(message, INPUT)
            matched.add(len(entries) - 1)
            cursor = len(entries)
        if self._fresh_tools:
            # Tool results the input passes over (it goes on past them) without carrying them: the
            # model was shown them some other way, and the input above is what it saw. An input
            # that stops short of them (a truncated window) says nothing about them.
            reach = max(matched, default=-1)
            passed_over = {i for i in self._fresh_tools if i not in matched and i < reach}
            if passed_over:  # the usual input carries them: the entries stay as they are
                self.entries = [e for i, e in enumerate(entries) if i not in passed_over]

    def _merge(self, entry: _Entry, message: Message) -> None:
        entry.merged = id(message)
        if entry.origin == TOOL_SPAN:  # what the model was sent replaces what the tool span recorded
            for name in ("content", "name"):
                if message.get(name) not in (None, ""):
                    entry.message[name] = message[name]
            entry.origin = INPUT
        else:  # the same message seen again: fill in what the earlier copy lacked
            for name in ("name", "content"):
                if entry.message.get(name) in (None, "") and message.get(name):
                    entry.message[name] = message[name]
        if message.get("is_error"):
            entry.message["is_error"] = True

    def add_tool(self, tool: ToolCall) -> None:
        call_id = tool.call_id or self._pending_call_id(tool.name)
        self._attach_to_placeholder(tool, call_id)
        message = make_message(
            "tool",
            tool.result if tool.result is not None else tool.error,
            name=tool.name,
            tool_call_id=call_id,
            is_error=tool.is_error,
        )
        key = message_key(message)
        existing = next((e for e in self.entries if e.key == key), None) if call_id else None
        if existing is not None:
            if message.get("is_error"):
                existing.message["is_error"] = True
            for name in ("content", "name"):
                if existing.message.get(name) in (None, "") and message.get(name):
                    existing.message[name] = message[name]
        elif call_id or tool.result is not None or tool.is_error:
            self._append(message, TOOL_SPAN, key=key)
            self._fresh_tools.append(len(self.entries) - 1)

    def _attach_to_placeholder(self, tool: ToolCall, call_id: str | None) -> None:
        """A tool ran after a content-free model turn: that turn asked for it."""
        for entry in reversed(self.entries):
            if entry.message.get("role") != "assistant":
                continue
            if (
                entry.placeholder
                and call_id
                and call_id not in {c.get("id") for c in entry.message["tool_calls"]}
            ):
                entry.message["tool_calls"] = [
                    *entry.message.get("tool_calls", []),
                    make_tool_call(call_id, tool.name, tool.arguments),
                ]
                entry.key = message_key(entry.message)
                entry.merged = 0  # the messages merged so far had its old key
            return

    def _pending_call_id(self, name: str | None) -> str | None:
        answered = {e.message.get("tool_call_id") for e in self.entries if e.message.get("role") == "tool"}
        for entry in reversed(self.entries):
            for call in entry.message.get("tool_calls") or []:
                if (
                    call.get("id")
                    and call["id"] not in answered
                    and (name is None or call.get("name") == name)
                ):
                    return str(call["id"])
        return None

    def finish(self, agent_output: str | None = None) -> list[Message]:
        """The messages, with tool names filled in from their calls and `is_error` always set. A
        successful tool after the model's last turn whose result is the agent's own output is how
        the agent answered (smolagents' `final_answer`): `tool_output`, not a message. The last
        step: the messages are the entries' own, finished in place."""
        while (
            agent_output
            and self.entries
            and self.entries[-1].origin == TOOL_SPAN
            and not self.entries[-1].message.get("is_error")
            and (self.entries[-1].message.get("content") or "").strip() == agent_output.strip()
        ):
            self.tool_output = self.tool_output or self.entries[-1].message.get("content")
            self.entries.pop()
        out = [entry.message for entry in self.entries]  # the entries' own copies (`_append`), handed over
        names: dict[str, str | None] | None = None  # tool names by call id, when a tool message lacks one
        for message in out:  # in the lake's message shape (`make_message`): every field is there
            if message["role"] == "tool" and not message["name"]:
                if names is None:
                    names = {c["id"]: c["name"] for m in out for c in m["tool_calls"] if c["id"]}
                message["name"] = names.get(message["tool_call_id"])
            message["is_error"] = bool(message["is_error"])
        return out


def build_conversation(
    calls: Iterable[LLMCall | ToolCall], agent_output: str | None = None
) -> tuple[list[Message], str | None]:
    """One conversation from LLM and tool calls already sorted in time order, and the output of the
    tool that gave the agent's answer after the model's last turn (None when there was none)."""
    conversation = Conversation()
    for call in calls:
        if isinstance(call, LLMCall):
            conversation.add_call(call)
        else:
            conversation.add_tool(call)
    messages = conversation.finish(agent_output)
    return messages, conversation.tool_output


def final_output(messages: list[Message]) -> str | None:
    """The last assistant text that is not a tool call: the agent's answer."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content") and not message.get("tool_calls"):
            return str(message["content"])
    return None
