"""The normalised vocabulary every convention is mapped into: one LLM call or one tool call per span.

Messages are plain dicts in the lake's `MESSAGE` struct shape (role, content, name,
tool_call_id, tool_calls[{id, name, arguments}], is_error), so assembled conversations
go straight into Arrow without another conversion. Tool definitions are OpenAI-style
`{"type": "function", "function": {name, description, parameters}}` dicts.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from store.messages import ROLE_ALIASES as LAKE_ROLE_ALIASES

Message = dict[str, Any]
# A `spans` row with `attributes` as a dict, `events` as a list of dicts, and `start_time` /
# `end_time` as microseconds since the epoch (`ingest.assembly.span_dicts`).
Span = dict[str, Any]


# The classes here and in the assembler write their `__init__` out: mypyc compiles a written one
# into a direct native call, while the one `@dataclass` generates runs interpreted, through
# `type.__call__` (6% of assembly's instructions when they were generated).
@dataclass(slots=True, init=False)
class SpanCall:
    """What every normalised call keeps of the span it was read from, whatever the convention:
    the span's ids and times. `LLMCall` and `ToolCall` add what the call itself holds."""

    span_id: str
    trace_id: str
    convention: str  # genai, openllmetry, openinference, langfuse, vercel
    start_time: int | None  # microseconds since the epoch
    end_time: int | None

    def __init__(self, span: Span, convention: str) -> None:
        self.span_id, self.trace_id, self.convention = span["span_id"], span["trace_id"], convention
        self.start_time, self.end_time = span.get("start_time"), span.get("end_time")


@dataclass(slots=True, init=False)
class LLMCall(SpanCall):
    """One model invocation: what went in, what came out, and how it was asked."""

    input_messages: list[Message]
    output_messages: list[Message]
    tools: list[dict[str, Any]]
    request_model: str | None
    response_model: str | None
    provider: str | None
    params: dict[str, Any]  # temperature, top_p, max_tokens, ...
    input_tokens: int | None
    output_tokens: int | None
    response_id: str | None
    finish_reasons: list[str]
    error: str | None
    has_content: bool  # it carries messages (in or out): derived from them
    # Content stored elsewhere (`gen_ai.input.messages.ref`, ...): the references, by what they hold.
    content_refs: dict[str, Any]

    def __init__(
        self,
        span: Span,
        convention: str,
        input_messages: list[Message] | None = None,
        output_messages: list[Message] | None = None,
        tools: list[dict[str, Any]] | None = None,
        request_model: str | None = None,
        response_model: str | None = None,
        provider: str | None = None,
        params: dict[str, Any] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        response_id: str | None = None,
        finish_reasons: list[str] | None = None,
        error: str | None = None,
        content_refs: dict[str, Any] | None = None,
    ) -> None:
        # Named, not `super()`: `slots=True` makes a new class, which the zero-argument form does not know.
        SpanCall.__init__(self, span, convention)
        self.input_messages = [] if input_messages is None else input_messages
        self.output_messages = [] if output_messages is None else output_messages
        self.tools = [] if tools is None else tools
        self.request_model, self.response_model, self.provider = request_model, response_model, provider
        self.params = {} if params is None else params
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.response_id = response_id
        self.finish_reasons = [] if finish_reasons is None else finish_reasons
        self.error = error
        self.has_content = bool(self.input_messages or self.output_messages)
        self.content_refs = {} if content_refs is None else content_refs

    @property
    def model(self) -> str | None:
        """The model that answered, else the one asked for."""
        return self.response_model or self.request_model


@dataclass(slots=True, init=False)
class ToolCall(SpanCall):
    """One tool execution: the call the model made and what the tool returned."""

    name: str | None
    call_id: str | None
    arguments: str | None  # JSON text
    result: str | None
    description: str | None
    parameters: Any  # the tool's parameter schema, when the tool span declares it
    error: str | None

    def __init__(
        self,
        span: Span,
        convention: str,
        name: str | None = None,
        call_id: str | None = None,
        arguments: str | None = None,
        result: str | None = None,
        description: str | None = None,
        parameters: Any = None,
        error: str | None = None,
    ) -> None:
        SpanCall.__init__(self, span, convention)
        self.name, self.call_id, self.arguments, self.result = name, call_id, arguments, result
        self.description, self.parameters, self.error = description, parameters, error

    @property
    def is_error(self) -> bool:
        return self.error is not None


# --- helpers shared by the normalisers ---------------------------------------------------


# The lake's rule (store.messages), as a dict the compiled code knows the type of.
ROLE_ALIASES: dict[str, str] = dict(LAKE_ROLE_ALIASES)


def make_message(
    role: str,
    content: str | None = None,
    *,
    name: str | None = None,
    tool_call_id: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    is_error: bool | None = None,
) -> Message:
    """A message dict in the lake's struct shape (framework-only roles mapped to the model's).

    The compiled twin of `store.messages.lake_message`: this module runs per message of every
    chat span, where a call into interpreted code would cost; tests/ingest/test_message_rules.py
    holds the two to the same output."""
    return {
        "role": ROLE_ALIASES.get(role, role),
        "content": content,
        "name": name,
        "tool_call_id": tool_call_id,
        "tool_calls": tool_calls or [],
        "is_error": is_error,
    }


def make_tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A tool call in the lake's struct shape, its id trimmed, its name text and its arguments
    JSON text (the compiled twin of the lake's rule in `store.messages.from_openai`)."""
    return {"id": strip_or_none(call_id), "name": text_or_none(name), "arguments": as_json_text(arguments)}


def text_or_none(value: Any) -> str | None:
    """A name as text (a number too), or None (the compiled twin of `store.messages.text_or_none`)."""
    return value if value is None or isinstance(value, str) else str(value)


def strip_or_none(value: Any) -> str | None:
    """An id as text, or None when absent (the compiled twin of `store.messages.an_id`)."""
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith("<") and text.endswith(">"):
        return None
    return text or None


def as_json_text(value: Any) -> str | None:
    """Strings are kept exactly as produced (arguments are the model's own text); the rest is dumped
    (the compiled twin of `store.messages.json_text`)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits, NaN kept as NaN
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def as_text(value: Any) -> str | None:
    """Message content as text: strings stay, lists of text parts are joined, the rest is JSON
    (the compiled twin of `store.messages.content_text`)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [p.get("text", p.get("content")) for p in value if isinstance(p, dict)]
        strings = [t for t in texts if isinstance(t, str)]
        if strings and len(strings) == len(value):
            return "".join(strings)
    # Structured results are rendered as Python frameworks render them for the model (json.dumps).
    return _AS_PYTHON_RENDERS(value)


def _python_renderer() -> Callable[[Any], str]:
    """`json.dumps(value, ensure_ascii=False)` with its C encoder made once (`JSONEncoder.encode`
    makes one per call: more than half of what rendering a tool result cost), and no check for
    cycles per container (values parsed from JSON hold none)."""
    encoder = json.JSONEncoder(ensure_ascii=False, check_circular=False)
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # an interpreter without the C accelerator
        return encoder.encode
    chunks = make_encoder(
        None,  # no cycle markers
        encoder.default,
        json.encoder.encode_basestring,
        None,  # no indent
        encoder.key_separator,
        encoder.item_separator,
        False,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan
    )
    return lambda value: "".join(chunks(value, 0))


_AS_PYTHON_RENDERS = _python_renderer()


def maybe_json(value: Any) -> Any:
    """Parse JSON text when it is JSON; anything else is returned unchanged."""
    if isinstance(value, str) and value[:1] in ("[", "{", '"'):
        try:
            return orjson.loads(value)  # chat spans repeat the whole history: parsing is the hot spot
        except orjson.JSONDecodeError:
            try:
                return json.loads(value)  # NaN/Infinity and other liberties orjson refuses
            except ValueError:
                return value
    return value


def as_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def text_attr(attrs: dict[str, Any], key: str) -> str | None:
    """An attribute that must be text (an operation name, a span kind): None when it is not."""
    value = attrs.get(key)
    return value if isinstance(value, str) else None


def first(attrs: dict[str, Any], *keys: str) -> Any:
    """The first present, non-empty attribute among `keys` (a precedence list)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def openai_tool(definition: Any) -> dict[str, Any] | None:
    """Any tool definition shape (OpenAI, semconv flat, JSON text) as an OpenAI-style function tool."""
    definition = maybe_json(definition)
    if not isinstance(definition, dict):
        return None
    if isinstance(definition.get("function"), dict):
        fn = definition["function"]
    else:
        fn = {k: v for k, v in definition.items() if k != "type"}
    if not fn.get("name") or not isinstance(fn["name"], str):
        return None
    out: dict[str, Any] = {"name": fn["name"]}
    if fn.get("description") is not None:
        out["description"] = str(fn["description"])
    # OpenAI `parameters`; Anthropic `input_schema`; Bedrock (strands) `inputSchema: {"json": ...}`;
    # the Vercel AI SDK `inputSchema` (a JSON schema itself).
    parameters = maybe_json(
        first(fn, "parameters", "input_schema", "inputSchema", "json_schema", "parametersJsonSchema")
    )
    if isinstance(parameters, dict) and set(parameters) == {"json"}:
        parameters = maybe_json(parameters["json"])
    if isinstance(parameters, dict) and isinstance(parameters.get("jsonSchema"), dict):
        parameters = parameters["jsonSchema"]
    if isinstance(parameters, dict):
        out["parameters"] = parameters
    return {"type": "function", "function": out}


def openai_tools(definitions: Any) -> list[dict[str, Any]]:
    """A list of tool definitions as OpenAI-style function tools (`openai_tool`), the unreadable ones
    dropped; anything but a list declares no tools."""
    if not isinstance(definitions, list):
        return []
    return [tool for tool in (openai_tool(d) for d in definitions) if tool]


def _completeness(tool: dict[str, Any]) -> tuple[int, int, int]:
    fn = tool["function"]
    parameters = fn.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return (
        len(properties) if isinstance(properties, dict) else -1,
        int(isinstance(parameters, dict) and bool(parameters)),
        len(str(fn.get("description") or "")),
    )


def merge_tools(*definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One definition per tool name, in first-seen order: the most complete parameters any
    source gave (a definition without parameters never replaces one with them), and the
    first description when the most complete one has none."""
    best: dict[str, dict[str, Any]] = {}
    for tools in definitions:
        for tool in tools:
            name = tool["function"]["name"]
            held = best.get(name)
            if held is None or _completeness(tool) > _completeness(held):
                description = (held or {}).get("function", {}).get("description")
                tool = {"type": "function", "function": dict(tool["function"])}
                if not tool["function"].get("description") and description:
                    tool["function"]["description"] = description
                best[name] = tool
            elif not held["function"].get("description") and tool["function"].get("description"):
                held["function"]["description"] = tool["function"]["description"]
    return list(best.values())


def error_of(span: Span) -> str | None:
    """The span's error, from `error.type` or an ERROR status."""
    attrs = span.get("attributes") or {}
    if span.get("status_code") == "ERROR" or attrs.get("error.type"):
        kind = str(attrs.get("error.type") or "").strip()
        message = str(span.get("status_message") or "").strip()
        if kind and message and kind not in message:
            return f"{kind}: {message}"
        return message or kind or "error"
    return None


def indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """Group flattened `prefix.N.rest` attributes by N: {N: {rest: value}}, in index order."""
    grouped: dict[int, dict[str, Any]] = {}
    cut = len(prefix) + 1
    for key, value in attrs.items():
        if not key.startswith(prefix + "."):
            continue
        index, _, rest = key[cut:].partition(".")
        if index.isdigit():
            grouped.setdefault(int(index), {})[rest] = value
    return dict(sorted(grouped.items()))
