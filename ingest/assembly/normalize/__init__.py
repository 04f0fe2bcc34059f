"""Normalisers: pure functions from one span to one LLM call or tool call, one module per convention.

`normalize_span` picks the convention from the attributes a span carries, most specific
first (Langfuse observations and OpenInference kinds name themselves; OpenLLMetry's
legacy keys and the Vercel AI SDK's `ai.operationId` are unmistakable; everything else is
read as OTel GenAI semconv).

>>> call = normalize_span({"trace_id": "t", "span_id": "s", "attributes": {
...     "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
...     "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]'}})
>>> call.model, call.input_messages[0]["content"]
('gpt-4o', 'hi')
"""

from __future__ import annotations

from ingest.assembly.normalize.genai import normalize_genai
from ingest.assembly.normalize.genai_messages import HistoryMemo
from ingest.assembly.normalize.langfuse import is_langfuse_span, normalize_langfuse
from ingest.assembly.normalize.openinference import is_openinference_span, normalize_openinference
from ingest.assembly.normalize.openllmetry import MARKERS as OPENLLMETRY_MARKERS
from ingest.assembly.normalize.openllmetry import is_openllmetry_span, normalize_openllmetry
from ingest.assembly.normalize.types import LLMCall, Message, Span, ToolCall, make_message
from ingest.assembly.normalize.vercel import is_vercel_span, normalize_vercel

__all__ = [
    "HistoryMemo",
    "LLMCall",
    "Message",
    "Span",
    "ToolCall",
    "make_message",
    "normalize_genai",
    "normalize_langfuse",
    "normalize_openinference",
    "normalize_openllmetry",
    "normalize_span",
    "normalize_vercel",
]


# Keys that some convention other than GenAI semconv looks for: a span with none of them is GenAI's
# (each `is_*_span` below is a test for one of these keys).
_OTHER_CONVENTIONS = frozenset(
    ["langfuse.observation.type", "openinference.span.kind", "ai.operationId", *OPENLLMETRY_MARKERS]
)


def normalize_span(span: Span, memo: HistoryMemo | None = None) -> LLMCall | ToolCall | None:
    """The span as a normalised LLM call or tool call under whichever convention it uses, else None.
    `memo`: one per trace, with its spans given in time order, to parse repeated history once."""
    attrs = span.get("attributes") or {}
    if _OTHER_CONVENTIONS.isdisjoint(attrs):  # the usual case: one pass over the keys decides
        return normalize_genai(span, memo)
    if is_langfuse_span(attrs):
        found = normalize_langfuse(span)
        if found is not None:
            return found
    if is_openinference_span(attrs):
        return normalize_openinference(span)
    if is_openllmetry_span(attrs):
        return normalize_openllmetry(span)
    if is_vercel_span(attrs) and not attrs.get("gen_ai.operation.name"):
        return normalize_vercel(span)
    return normalize_genai(span, memo)
