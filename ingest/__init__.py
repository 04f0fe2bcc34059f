"""Ingest: production agent traces (OTLP, Langfuse) -> `spans` -> trajectories and rewards.

One folder per source over one shared core:

- `otlp/`: the OTLP/HTTP collector, the in-process exporter, `instrument()`;
- `langfuse/`: the Langfuse puller and export importer;
- the core both use: `normalize/` (OTel GenAI, OpenInference, OpenLLMetry, Langfuse
  attributes -> LLM and tool calls), `conversation` and `assemble` (spans ->
  trajectories, pure), `lakeio` (the one assembly path against a lake), `scores` (the
  one Langfuse score mapping), `records` (ids and times), `redact`, `pending`.

Public surface:

- `instrument(lake=..., endpoint=..., service_name=...)`: one-call set-up of an agent's traces
  and logs (the feedback channel);
- `feedback(score, comment=..., correct_answer=..., trace_id=...)`: the user's verdict on a
  conversation (a `rewards` row) and, optionally, its right answer (a `labels` row);
- `LakeSpanExporter(lake)`, `LakeLogExporter`: OpenTelemetry exporters writing straight into a lake;
- `assemble(spans) -> Assembled`: the pure spans -> trajectories/rewards step;
- `assemble_traces`, `rebuild`, `pending_trace_ids`: the same against a lake (`trajlake assemble`);
- `otlp.app.create_app(config)` / `otlp.app.serve(config)`: the OTLP/HTTP collector;
- `normalize.normalize_span(span)`: one span -> `LLMCall` | `ToolCall` | None.
"""

from ingest.assembly import Assembled, assemble, span_dicts
from ingest.errors import (
    IngestError,
    MalformedPayload,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
)
from ingest.lakeio import AssembleResult, assemble_traces, pending_trace_ids, rebuild, spans_of_traces
from ingest.otlp.config import CollectorConfig
from ingest.otlp.exporter import LakeLogExporter, LakeSpanExporter
from ingest.otlp.feedback import feedback
from ingest.otlp.instrument import InstrumentedProvider, instrument
from ingest.redact import RedactionConfig

__all__ = [
    "AssembleResult",
    "Assembled",
    "CollectorConfig",
    "IngestError",
    "InstrumentedProvider",
    "LakeLogExporter",
    "LakeSpanExporter",
    "MalformedPayload",
    "Overloaded",
    "PayloadTooLarge",
    "RedactionConfig",
    "Unauthorized",
    "UnsupportedMediaType",
    "assemble",
    "assemble_traces",
    "feedback",
    "instrument",
    "pending_trace_ids",
    "rebuild",
    "span_dicts",
    "spans_of_traces",
]
