"""`ingest.feedback`: the user's verdict (and the right answer) sent from the agent's process
reaches the lake as a `rewards` row and a `labels` row of the conversation it rates, through a
real collector on loopback (`instrument(endpoint=...)`) and in-process (`instrument(lake=...)`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import _logs, trace

from ingest import InstrumentedProvider, feedback, instrument
from ingest.errors import InstrumentError
from store.lake import Lake
from tests.ingest.conftest import RunningCollector, sql, wait_for


def agent_trace(provider: InstrumentedProvider) -> str:
    """Run the recorded agent; its trace id (hex)."""
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("chat m") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "m")
            span.set_attribute(
                "gen_ai.input.messages",
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": "5 miles in km?"}]}]),
            )
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "7 km"}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            )
        return format(root.get_span_context().trace_id, "032x")


def feedback_rows(lake: Lake, trace_id: str) -> list[dict[str, Any]]:
    if not (lake.has_table("rewards") and lake.has_table("trajectories")):
        return []  # the collector has not written yet
    return sql(
        lake,
        "SELECT r.name, r.value, r.explanation, r.scorer, r.metadata FROM rewards r "
        f"JOIN trajectories t USING (trajectory_id) WHERE t.trace_id = '{trace_id}' ORDER BY r.name",
    )


def label_rows(lake: Lake, trace_id: str) -> list[dict[str, Any]]:
    if not (lake.has_table("labels") and lake.has_table("trajectories")):
        return []
    return sql(
        lake,
        "SELECT l.trajectory_id, l.expected, l.verdict, l.source, l.comment FROM labels l "
        f"JOIN trajectories t USING (trajectory_id) WHERE t.trace_id = '{trace_id}'",
    )


def test_feedback_through_a_collector_is_a_reward_and_a_label_of_the_conversation(
    collector: RunningCollector,
) -> None:
    provider = instrument(endpoint=collector.url, service_name="units", set_global=False, batch=False)
    try:
        wrong = agent_trace(provider)
        right = agent_trace(provider)
        tracer = provider.get_tracer("t")
        # Sent while another span is current: the ids given win over the current span's.
        with tracer.start_as_current_span("unrelated"):
            feedback(0.0, comment="wrong factor", correct_answer="8.05 km", trace_id=wrong, provider=provider)
        feedback(True, trace_id=right, provider=provider)
        provider.force_flush()
    finally:
        provider.shutdown()
    rated = wait_for(lambda: feedback_rows(collector.lake, wrong))
    assert [(r["name"], r["value"], r["explanation"], r["scorer"]) for r in rated] == [
        ("user_feedback", 0.0, "wrong factor", "otel:gen_ai.evaluation.result")
    ]
    (label,) = wait_for(lambda: label_rows(collector.lake, wrong))
    assert json.loads(label["expected"]) == {"final_output": "8.05 km"}
    assert (label["verdict"], label["source"], label["comment"]) == (0.0, "feedback", "wrong factor")
    (good,) = wait_for(lambda: feedback_rows(collector.lake, right))
    assert good["value"] == 1.0 and json.loads(good["metadata"])["label"] == "correct"
    assert label_rows(collector.lake, right) == []  # no correct answer sent: no label


def test_feedback_inside_the_agent_span_rates_that_trace_in_process(lake: Lake) -> None:
    provider = instrument(lake=lake, service_name="units", set_global=False, batch=False)
    try:
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("invoke_agent a") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            trace_id = format(root.get_span_context().trace_id, "032x")
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "m")
                span.set_attribute(
                    "gen_ai.output.messages",
                    json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "7 km"}]}]),
                )
            feedback(0.25, name="stars", provider=provider)  # no trace id: the current span's
        provider.force_flush()
    finally:
        provider.shutdown()
    (row,) = feedback_rows(lake, trace_id)
    assert (row["name"], row["value"]) == ("stars", 0.25)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: feedback(float("nan"), trace_id="ab" * 16, provider=p), "finite number"),
        (lambda p: feedback("good", trace_id="ab" * 16, provider=p), "finite number"),  # type: ignore[arg-type]
        (lambda p: feedback(1.0, trace_id="xyz", provider=p), "32 hex digits"),
        (lambda p: feedback(1.0, trace_id="0" * 32, provider=p), "not all zero"),
        (lambda p: feedback(1.0, span_id="ab" * 8, provider=p), "needs the `trace_id`"),
        (lambda p: feedback(1.0, provider=p), "inside the agent's span"),
        (lambda p: feedback(1.0, trace_id="ab" * 16, comment="", provider=p), "`comment`"),
        (lambda p: feedback(1.0, trace_id="ab" * 16, provider=object()), "pass what"),  # type: ignore[arg-type]
    ],
)
def test_bad_feedback_is_refused_naming_what(
    lake: Lake, call: Callable[[InstrumentedProvider], None], message: str
) -> None:
    provider = instrument(lake=lake, set_global=False, batch=False, instrument_openai=False)
    try:
        with pytest.raises(InstrumentError, match=message):
            call(provider)
    finally:
        provider.shutdown()


def test_feedback_without_an_instrumented_process_says_what_to_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the OpenTelemetry API answers in a process no one configured (another test may have).
    monkeypatch.setattr(_logs, "get_logger_provider", lambda: _logs.NoOpLoggerProvider())
    assert trace.get_current_span().get_span_context().is_valid is False
    with pytest.raises(InstrumentError, match=r"call `ingest.instrument\(...\)` first"):
        feedback(1.0, trace_id="ab" * 16)
