"""`feedback(...)`: the user's verdict on an agent's answer, sent from the agent's own process.

Feedback arrives after the agent's span has ended, so it is not a span event but an
OpenTelemetry log record, the GenAI `gen_ai.evaluation.result` event, carrying the trace
and span ids of what it rates (as the GenAI conventions say). The collector (or, with
`instrument(lake=...)`, the in-process exporter) keeps it with the trace's spans, and
assembly turns it into a `rewards` row of the conversation (`name`, default
`user_feedback`, scorer `otel:gen_ai.evaluation.result`). A `correct_answer` rides on the
same record as `trajlake.label.expected`, and becomes a `labels` row (`source` 'feedback'):
what the conversation should have answered, which scenarios take as their `expected`.

>>> provider = instrument(endpoint="http://127.0.0.1:4318")  # doctest: +SKIP
>>> with tracer.start_as_current_span("invoke_agent support") as span:  # doctest: +SKIP
...     answer = run_agent(question)
...     trace_id = format(span.get_span_context().trace_id, "032x")
>>> feedback(0.0, comment="wrong unit", correct_answer="12 km", trace_id=trace_id)  # doctest: +SKIP
>>> provider.force_flush()  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

from opentelemetry import _logs, trace
from opentelemetry.sdk._logs import LoggerProvider

from ingest.assembly.feedback import EVALUATION_EVENT, LABEL_EXPECTED
from ingest.errors import InstrumentError
from ingest.otlp.instrument import InstrumentedProvider

DEFAULT_NAME = "user_feedback"
SCOPE = "trajlake.feedback"


def feedback(
    score: float | bool,
    *,
    comment: str | None = None,
    correct_answer: str | None = None,
    trace_id: str | int | None = None,
    span_id: str | int | None = None,
    name: str = DEFAULT_NAME,
    label: str | None = None,
    provider: InstrumentedProvider | LoggerProvider | None = None,
) -> None:
    """Send feedback on one conversation: a `score` (a number, or a boolean: True is 1.0, "correct"),
    an optional `comment`, and optionally the `correct_answer` (text) the agent should have given.

    The conversation is the trace `trace_id` (32 hex digits, or the int OpenTelemetry holds), at
    the span `span_id` when given (else the trace's conversation); without `trace_id`, the current
    span's. `name` names the reward row (`user_feedback`, what `evaluate.production_reward`
    reads); `label` a category (default for a boolean: `correct`/`wrong`). `provider`: what
    `instrument()` returned, when it was called with `set_global=False`. Raises
    `InstrumentError` for a score that is not a finite number, bad ids, or no trace to tie
    the feedback to; sending happens in the background (`provider.force_flush()` waits for it).
    """
    value = _score(score)
    if label is None and isinstance(score, bool):
        label = "correct" if score else "wrong"
    trace_number, span_number = _ids(trace_id, span_id)
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": _text("name", name),
        "gen_ai.evaluation.score.value": value,
    }
    if label is not None:
        attributes["gen_ai.evaluation.score.label"] = _text("label", label)
    if comment is not None:
        attributes["gen_ai.evaluation.explanation"] = _text("comment", comment)
    if correct_answer is not None:
        attributes[LABEL_EXPECTED] = _text("correct_answer", correct_answer)
    # The record's context holds exactly what it rates: not whatever span happens to be current
    # where the feedback is sent. A span id of 0 (the trace's conversation) leaves it unset.
    rated = trace.SpanContext(
        trace_number, span_number, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    record = _logs.LogRecord(
        context=trace.set_span_in_context(trace.NonRecordingSpan(rated)),
        event_name=EVALUATION_EVENT,
        attributes=attributes,
    )
    _logger_provider(provider).get_logger(SCOPE).emit(record)


def _score(score: Any) -> float:
    if isinstance(score, bool):
        return 1.0 if score else 0.0
    if isinstance(score, (int, float)) and math.isfinite(score):
        return float(score)
    raise InstrumentError(f"feedback `score` must be a finite number or a boolean, got {score!r:.40}")


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InstrumentError(f"feedback `{field}` must be non-empty text, got {value!r:.40}")
    return value


def _hex_id(field: str, value: str | int, digits: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) == digits:
        try:
            number = int(value, 16)
        except ValueError:
            number = 0
    else:
        number = 0
    if not 0 < number < 16**digits:
        raise InstrumentError(
            f"feedback `{field}` must be {digits} hex digits (not all zero), got {value!r:.40}"
        )
    return number


def _ids(trace_id: str | int | None, span_id: str | int | None) -> tuple[int, int]:
    """(trace id, span id; 0: the trace's conversation) of what the feedback rates."""
    if trace_id is not None:
        return _hex_id("trace_id", trace_id, 32), 0 if span_id is None else _hex_id("span_id", span_id, 16)
    if span_id is not None:
        raise InstrumentError("feedback `span_id` needs the `trace_id` it belongs to")
    current = trace.get_current_span().get_span_context()
    if not current.is_valid:
        raise InstrumentError(
            "feedback has no conversation to rate: call it inside the agent's span, or pass "
            "`trace_id=` (format(span.get_span_context().trace_id, '032x'))"
        )
    return current.trace_id, current.span_id


def _logger_provider(provider: InstrumentedProvider | LoggerProvider | None) -> LoggerProvider:
    if isinstance(provider, InstrumentedProvider):
        return provider.logger_provider
    if isinstance(provider, LoggerProvider):
        return provider
    if provider is not None:
        raise InstrumentError(
            f"feedback `provider` is a {type(provider).__name__}; pass what `ingest.instrument()` returned"
        )
    found = _logs.get_logger_provider()
    if not isinstance(found, LoggerProvider):  # the API's proxy: records would go nowhere
        raise InstrumentError(
            "feedback has nowhere to go: call `ingest.instrument(...)` first, or pass "
            "`provider=` (what it returned) when it was called with `set_global=False`"
        )
    return found
