"""Tool calls in the Qwen/Hermes format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

Parsing is pure and never raises on model output: a malformed call (bad JSON, no name,
arguments that are not an object, an unclosed tag) comes back with a snake_case `error`
code, and the agent loop records it as a failed tool call the model gets to see.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)


@dataclass(frozen=True)
class ParsedToolCall:
    """One tool call as the model wrote it; `error` is set (and name/arguments may be junk) when malformed."""

    name: str
    arguments: str  # JSON text of the arguments object (canonical form when it parsed)
    raw: str  # the text between the tags, exactly as sampled
    error: str | None = None  # bad_json, not_an_object, missing_name, bad_arguments, unclosed_tag

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ParsedTurn:
    """An assistant turn's text split into its prose and its tool calls."""

    content: str
    tool_calls: list[ParsedToolCall] = field(default_factory=list)


def parse_tool_call(body: str) -> ParsedToolCall:
    """Parse the JSON between one pair of tags."""
    raw = body
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError:
        return ParsedToolCall(name="", arguments="", raw=raw, error="bad_json")
    if not isinstance(obj, dict):
        return ParsedToolCall(name="", arguments="", raw=raw, error="not_an_object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedToolCall(name="", arguments="", raw=raw, error="missing_name")
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models emit the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ParsedToolCall(name=name, arguments=arguments, raw=raw, error="bad_arguments")
    if not isinstance(arguments, dict):
        return ParsedToolCall(name=name, arguments=json.dumps(arguments), raw=raw, error="bad_arguments")
    return ParsedToolCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False), raw=raw)


def parse_assistant_text(text: str) -> ParsedTurn:
    """Split sampled assistant text into prose and tool calls (well-formed or not)."""
    calls = [parse_tool_call(m.group(1)) for m in _BLOCK.finditer(text)]
    rest = _BLOCK.sub("", text)
    if OPEN_TAG in rest:  # an opening tag never closed: the call was cut off or garbled
        head, _, tail = rest.partition(OPEN_TAG)
        calls.append(ParsedToolCall(name="", arguments="", raw=tail, error="unclosed_tag"))
        rest = head
    return ParsedTurn(content=rest.strip(), tool_calls=calls)


def canonical_arguments(arguments: str | dict) -> str:
    """Arguments as canonical JSON (sorted keys, no spaces): the key recorded results are matched by."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments.strip()
        return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
