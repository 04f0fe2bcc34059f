"""Span rows in the `spans` table's shape for the assembler's tests: any span (`get_span`), an agent
span (`agent`), a chat span with its history and answer (`chat`), GenAI text messages (`text`), the
rows as a table (`spans_table`), and a trajectory's messages as (role, content) pairs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from ingest.otlp.convert import ROW_SCHEMA

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
TRACE = "0af7651916cd43dd8448eb211c80319c"


def get_span(
    span_id: str,
    parent: str | None,
    attrs: dict[str, Any],
    t: int,
    *,
    name: str = "span",
    events: list[dict[str, Any]] | None = None,
    kind: str = "INTERNAL",
    status: str = "UNSET",
    trace_id: str = TRACE,
) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "kind": kind,
        "source": "otel",
        "start_time": T0 + timedelta(seconds=t),
        "end_time": T0 + timedelta(seconds=t, milliseconds=500),
        "status_code": status,
        "attributes": json.dumps(attrs),
        "events": json.dumps(events or []),
        "service_name": "svc",
        "resource": "{}",
    }


def spans_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ROW_SCHEMA)


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def chat(
    span_id: str,
    parent: str | None,
    history: list[dict[str, Any]],
    answer: dict[str, Any],
    t: int,
    **extra: Any,
) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m-1",
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps([answer]),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        **extra,
    }
    return get_span(span_id, parent, attrs, t, name="chat m", kind="CLIENT")


def agent(span_id: str, parent: str | None, name: str, t: int) -> dict[str, Any]:
    return get_span(
        span_id,
        parent,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
        t,
        name=f"invoke_agent {name}",
    )


def roles_and_contents(row: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(m["role"], m["content"]) for m in row["messages"]]
