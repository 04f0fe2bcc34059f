"""Ingest: production agent traces (OTLP, Langfuse) -> `spans` -> trajectories and rewards.

Public surface:

- `instrument(lake=..., endpoint=..., service_name=...)`: one-call tracing set-up for an agent;
- `LakeSpanExporter(lake)`: an OpenTelemetry exporter writing straight into a lake;
- `assemble(spans) -> Assembled`: the pure spans -> trajectories/rewards step;
- `assemble_traces`, `rebuild`: the same against a lake (what `trajlake assemble` runs);
- `collector.create_app(config)` / `collector.serve(config)`: the OTLP/HTTP collector;
- `normalize.normalize_span(span)`: one span -> `LLMCall` | `ToolCall` | None.
"""

from ingest.assemble import Assembled, assemble, span_dicts
from ingest.config import CollectorConfig
from ingest.errors import (
    IngestError,
    MalformedPayload,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
)
from ingest.exporter import LakeSpanExporter
from ingest.instrument import instrument
from ingest.lakeio import AssembleResult, assemble_traces, read_trace_spans, rebuild
from ingest.redact import RedactionConfig

__all__ = [
    "AssembleResult",
    "Assembled",
    "CollectorConfig",
    "IngestError",
    "LakeSpanExporter",
    "MalformedPayload",
    "Overloaded",
    "PayloadTooLarge",
    "RedactionConfig",
    "Unauthorized",
    "UnsupportedMediaType",
    "assemble",
    "assemble_traces",
    "instrument",
    "read_trace_spans",
    "rebuild",
    "span_dicts",
]
