"""Feedback on a trace as `rewards` rows: GenAI evaluation events and OpenInference annotations.

`gen_ai.evaluation.result` events (span events or log records) and OpenInference
`annotation.*` attributes become `rewards` rows of the run that holds the evaluated span.
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


def feedback_rows(span: Span, run_id: str) -> list[dict[str, Any]]:
    rows = []
    for event in span.get("events") or []:
        if event.get("name") != EVALUATION_EVENT:
            continue
        attrs = dict(event.get("attributes") or {})
        body = maybe_json(attrs.get("log.body"))
        if isinstance(body, dict):
            attrs = {**body, **attrs}
        rows.append(
            _reward(
                run_id,
                attrs.get("gen_ai.evaluation.name"),
                "otel:gen_ai.evaluation.result",
                attrs.get("gen_ai.evaluation.score.value"),
                attrs.get("gen_ai.evaluation.explanation"),
                event.get("time"),
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
