"""Feedback on a trace as `rewards` rows: GenAI evaluation events and OpenInference annotations.

`gen_ai.evaluation.result` events (span events or log records) and OpenInference
`annotation.*` attributes become `rewards` rows of the run that holds the evaluated span.
An evaluation that carries the right answer (`trajlake.label.expected`, text) is a label too:
a `labels` row (`source` 'feedback') of the same run, with the score as its verdict.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from ingest.assembly.normalize import Span
from ingest.assembly.normalize.types import maybe_json
from ingest.assembly.runs import to_ns
from store.schema import PARTITION_COLUMN, WRITTEN_AT

EVALUATION_EVENT = "gen_ai.evaluation.result"
LABEL_EXPECTED = "trajlake.label.expected"  # the right answer, sent with the feedback (`ingest.labels`)


def _evaluations(span: Span) -> list[tuple[dict[str, Any], Any]]:
    """(attributes, time) of each evaluation event of a span, a log record's body folded in."""
    found = []
    for event in span.get("events") or []:
        if event.get("name") != EVALUATION_EVENT:
            continue
        attrs = dict(event.get("attributes") or {})
        body = maybe_json(attrs.get("log.body"))
        if isinstance(body, dict):
            attrs = {**body, **attrs}
        found.append((attrs, event.get("time")))
    return found


def label_rows(span: Span, run_id: str, user_id: str | None) -> list[dict[str, Any]]:
    """`labels` rows of the evaluations of `span` that say what the right answer was."""
    rows = []
    for attrs, time_ns in _evaluations(span):
        expected = attrs.get(LABEL_EXPECTED)
        if expected is None or str(expected) == "":
            continue
        reward = _reward(
            run_id,
            attrs.get("gen_ai.evaluation.name"),
            "",
            attrs.get("gen_ai.evaluation.score.value"),
            None,
            time_ns,
            label=None,
            span_id=span["span_id"],
        )
        verdict = reward["value"]
        rows.append(
            {
                "trajectory_id": run_id,
                "name": "expected",
                "trace_id": span["trace_id"],
                "expected": json.dumps({"final_output": str(expected)}, ensure_ascii=False),
                "verdict": verdict if verdict is not None and 0 <= verdict <= 1 else None,
                "source": "feedback",
                "user_id": user_id,
                "labeled_by": str(attrs.get("gen_ai.evaluation.name") or "feedback"),
                "comment": None
                if attrs.get("gen_ai.evaluation.explanation") is None
                else str(attrs.get("gen_ai.evaluation.explanation")),
                "labeled_at": reward["scored_at"],
                "metadata": json.dumps({"span_id": span["span_id"]}),
                WRITTEN_AT: None,
            }
        )
    return rows


def feedback_rows(span: Span, run_id: str) -> list[dict[str, Any]]:
    rows = []
    for attrs, time_ns in _evaluations(span):
        rows.append(
            _reward(
                run_id,
                attrs.get("gen_ai.evaluation.name"),
                "otel:gen_ai.evaluation.result",
                attrs.get("gen_ai.evaluation.score.value"),
                attrs.get("gen_ai.evaluation.explanation"),
                time_ns,
                label=attrs.get("gen_ai.evaluation.score.label"),
                span_id=span["span_id"],
            )
        )
    attrs = span["attributes"]
    if "annotation.name" in attrs:
        rows.append(
            _reward(
                run_id,
                attrs.get("annotation.name"),
                "openinference:annotation",
                attrs.get("annotation.score"),
                attrs.get("annotation.explanation"),
                to_ns(span.get("end_time") or span.get("start_time")),
                label=attrs.get("annotation.label"),
                span_id=span["span_id"],
            )
        )
    return rows


def _reward(
    run_id: str,
    name: Any,
    scorer: str,
    value: Any,
    explanation: Any,
    time_ns: Any,
    *,
    label: Any,
    span_id: str,
) -> dict[str, Any]:
    try:
        number = None if value is None else float(value)
    except (TypeError, ValueError):  # a label-only evaluation: no number, the label is in metadata
        number = None
    if number is not None and not math.isfinite(number):  # NaN/inf: no usable number (raw_value keeps it)
        number = None
    scored_at = datetime.fromtimestamp((int(time_ns or 0)) / 1e9, tz=UTC)
    return {
        "trajectory_id": run_id,
        "name": str(name or "feedback"),
        "scorer": scorer,
        "value": number,
        "explanation": None if explanation is None else str(explanation),
        "group_id": None,
        "scored_at": scored_at,
        "run_id": None,
        "status": "ok",
        "error": None,
        "metadata": json.dumps(
            {"label": label, "span_id": span_id, "raw_value": value}, sort_keys=True, default=str
        ),
        WRITTEN_AT: None,
        PARTITION_COLUMN: scored_at.date(),
    }
