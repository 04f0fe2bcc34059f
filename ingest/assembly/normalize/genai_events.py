"""GenAI content carried by events (span events, or OTLP log records the assembler folds into their span).

Two generations of events:

- `gen_ai.client.inference.operation.details`: the span's own content attributes
  (`gen_ai.input.messages`, ...) on an event; some SDKs (strands with the latest
  conventions) spread one call over several such events, one attribute each, so they are
  merged in time order;
- the deprecated per-message events (`gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`), whose `content` /
  `message` is OpenAI-shaped, plain text, or (strands, Bedrock-style) JSON text of content
  blocks: `{"text"}`, `{"toolUse": {toolUseId, name, input}}`,
  `{"toolResult": {toolUseId, status, content}}`.
"""

from __future__ import annotations

from typing import Any

from ingest.assembly.normalize.genai_messages import messages_from_openai
from ingest.assembly.normalize.types import (
    Message,
    as_json_text,
    as_text,
    make_message,
    make_tool_call,
    maybe_json,
    strip_or_none,
)

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
DEPRECATED_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"


def _in_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=_event_time)


def _event_time(event: dict[str, Any]) -> int:
    time = event.get("time")
    return time if isinstance(time, int) else 0


def details_attributes(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The attributes of every `...operation.details` event, merged in time order."""
    merged: dict[str, Any] = {}
    for event in _in_order(events):
        if event.get("name") == DETAILS_EVENT and isinstance(event.get("attributes"), dict):
            merged.update(event["attributes"])
    return merged


def event_body(event: dict[str, Any]) -> dict[str, Any]:
    attrs = event.get("attributes") or {}
    if not isinstance(attrs, dict):
        return {}
    body = maybe_json(attrs.get("log.body", attrs.get("event.body")))
    if isinstance(body, dict):
        return body
    # Very old instrumentations, and strands, put the fields straight on the event's attributes.
    return {k: maybe_json(v) for k, v in attrs.items()}


def has_message_events(events: list[dict[str, Any]]) -> bool:
    return any(e.get("name") in DEPRECATED_MESSAGE_EVENTS or e.get("name") == CHOICE_EVENT for e in events)


def _block_messages(role: str, blocks: list[Any]) -> list[Message]:
    """Bedrock-style content blocks as messages: text and tool uses in one, each tool result its own."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[Message] = []
    for block in blocks:
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, dict):
            continue
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            calls.append(make_tool_call(use.get("toolUseId"), use.get("name"), use.get("input")))
        elif isinstance(block.get("toolResult"), dict):
            result = block["toolResult"]
            results.append(
                make_message(
                    "tool",
                    as_text(maybe_json(result.get("content"))),
                    tool_call_id=strip_or_none(result.get("toolUseId")),
                    is_error=str(result.get("status") or "").lower() == "error",
                )
            )
        else:
            texts.append(as_json_text(block) or "")
    out = [make_message(role, "".join(texts), tool_calls=calls)] if texts or calls else []
    return out + results


def event_messages(role: str, content: Any, body: dict[str, Any]) -> list[Message]:
    """One event's content (any of the shapes above) as messages."""
    content = maybe_json(content)
    if (
        isinstance(content, list)
        and all(isinstance(b, (dict, str)) for b in content)
        and any(isinstance(b, dict) and {"text", "toolUse", "toolResult"} & set(b) for b in content)
    ):
        return _block_messages(role, content)
    if isinstance(content, dict) and ("role" in content or "content" in content or "tool_calls" in content):
        item = {"role": content.get("role") or role, **{k: v for k, v in content.items() if k != "role"}}
        return _openai_messages(item, body)
    item = {"role": body.get("role") if isinstance(body.get("role"), str) else role, "content": content}
    return _openai_messages(item, body)


def _openai_messages(item: dict[str, Any], body: dict[str, Any]) -> list[Message]:
    if item["role"] == "tool" and not item.get("tool_call_id"):
        item["tool_call_id"] = body.get("id", body.get("tool_call_id"))
    if body.get("tool_calls") and not item.get("tool_calls"):
        item["tool_calls"] = body["tool_calls"]
    return messages_from_openai([item])


def messages_from_events(events: list[dict[str, Any]]) -> tuple[list[Message], list[Message], list[str]]:
    """Input messages, output messages and finish reasons from the deprecated per-message events."""
    inputs: list[Message] = []
    outputs: list[Message] = []
    reasons: list[str] = []
    for event in _in_order(events):
        name = event.get("name")
        if name in DEPRECATED_MESSAGE_EVENTS:
            body = event_body(event)
            inputs.extend(event_messages(DEPRECATED_MESSAGE_EVENTS[name], body.get("content"), body))
        elif name == CHOICE_EVENT:
            body = event_body(event)
            outputs.extend(event_messages("assistant", body.get("message"), body))
            if body.get("finish_reason"):
                reasons.append(str(body["finish_reason"]))
    return inputs, outputs, reasons


def tool_event_io(events: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(arguments, result) a tool span records in events: strands sends the input as a
    `gen_ai.tool.message` and the result as a `gen_ai.choice`, or both as details events."""
    arguments: Any = None
    result: Any = None
    for event in _in_order(events):
        name = event.get("name")
        body = event_body(event)
        if name == "gen_ai.tool.message" and arguments is None:
            arguments = body.get("content")
        elif name == CHOICE_EVENT and result is None:
            result = maybe_json(body.get("message"))
    details = details_attributes(events)
    for item in maybe_json(details.get("gen_ai.output.messages")) or []:
        for part in (item.get("parts") or []) if isinstance(item, dict) else []:
            if isinstance(part, dict) and part.get("type") == "tool_call_response" and result is None:
                result = part.get("response", part.get("result"))
    return arguments, result
