"""`LakeSpanExporter`: an OpenTelemetry `SpanExporter` that writes straight to a lake.

It goes through exactly the collector's path: the SDK's own OTLP encoder
(`encode_spans`, the bytes an OTLP exporter would send) -> `spans_from_request` ->
redaction -> `store.write`, then assembles the traces whose root span has arrived.
A trace is assembled as soon as its root span is exported, so an agent that calls
`provider.force_flush()` after a run finds that run's trajectory in the lake. The
exporter's own `force_flush()` and `shutdown()` (called by `provider.shutdown()`) also
assemble traces still waiting for their root.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import store
from ingest.lakeio import assemble_traces
from ingest.otlp.convert import spans_from_request
from ingest.pending import PendingTraces
from ingest.redact import RedactionConfig, redact_table

log = logging.getLogger("trajlake.ingest.otlp.exporter")


class LakeSpanExporter(SpanExporter):
    """Export spans into `lake` (the `spans` table) and assemble their trajectories.

    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> from opentelemetry.sdk.trace.export import BatchSpanProcessor
    >>> provider = TracerProvider()
    >>> provider.add_span_processor(BatchSpanProcessor(LakeSpanExporter("./lake")))
    """

    def __init__(
        self,
        lake: store.Lake | str | os.PathLike[str],
        *,
        redaction: RedactionConfig | None = None,
        assemble: bool = True,
        source: str = "otel",
        durable: bool = True,
    ) -> None:
        self.lake = store.Lake.of(lake)
        self.redaction = redaction or RedactionConfig()
        self.assemble = assemble
        self.source = source
        self.durable = durable
        self.pending = PendingTraces(idle_timeout_s=float("inf"))
        self._lock = threading.Lock()
        self._shutdown = False
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            converted = spans_from_request(encode_spans(spans), source=self.source)
            table = redact_table(converted.table, self.redaction)
            with self._lock:
                if table.num_rows:
                    store.write(self.lake, "spans", table, durable=self.durable)
                    self.exported += table.num_rows
                if self.assemble:
                    self.pending.observe(table)
                    self._assemble(everything=False)
        except Exception:  # the SDK wants a result, not an exception, from its worker thread
            log.exception("exporting %d spans to %s failed", len(spans), self.lake)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _assemble(self, *, everything: bool) -> None:
        ready = self.pending.take_ready(everything=everything)
        if ready:
            assemble_traces(self.lake, ready)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Assemble every trace seen so far, root span or not."""
        if self.assemble:
            with self._lock:
                try:
                    self._assemble(everything=True)
                except Exception:
                    log.exception("assembling pending traces in %s failed", self.lake)
                    return False
        return True

    def shutdown(self) -> None:
        self.force_flush()
        self._shutdown = True
