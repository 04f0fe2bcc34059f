"""`LakeSpanExporter`: an OpenTelemetry `SpanExporter` that writes straight to a lake, and
`LakeLogExporter`, its companion for log records (user feedback, GenAI events).

It is the collector without HTTP: SDK spans become `spans` rows directly (no protobuf
round trip, `ingest.otlp.sdk_spans`), are appended to the same write-ahead spool (an
export returns once its rows are fsynced, redacted), and the collector's flusher and
assembler threads write them to the lake in large batches and assemble the traces whose
root span has arrived. A process that dies with spans spooled leaves them for the next
exporter or collector on the lake, which adopts them.

`force_flush()` writes everything spooled and assembles every trace seen so far, root
span or not; `shutdown()` (called by `provider.shutdown()`, and at exit) does the same
and stops the threads. The SDK's `provider.force_flush()` exports queued spans but does
not reach exporters: `instrument(lake=...)` wires it to this exporter's `force_flush`.

Log records take the collector's `/v1/logs` path without HTTP: the SDK's records are
encoded as the OTLP exporter would send them and converted by the same function the
collector's endpoint uses, then spooled beside the spans (one collector, one spool).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ingest.otlp.collector import Collector
from ingest.otlp.config import CollectorConfig
from ingest.otlp.convert import logs_from_request
from ingest.otlp.sdk_spans import spans_from_sdk
from ingest.redact import RedactionConfig
from store.lake import Lake

log = logging.getLogger("trajlake.ingest.otlp.exporter")


class LakeSpanExporter(SpanExporter):
    """Export spans into `lake` (the `spans` table) and assemble their trajectories.

    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> from opentelemetry.sdk.trace.export import BatchSpanProcessor
    >>> provider = TracerProvider()
    >>> exporter = LakeSpanExporter("./lake")
    >>> provider.add_span_processor(BatchSpanProcessor(exporter))
    >>> provider.add_span_processor(exporter.flush_processor())  # provider.force_flush() reaches the lake
    """

    def __init__(
        self,
        lake: Lake | str | os.PathLike[str],
        *,
        redaction: RedactionConfig | None = None,
        assemble: bool = True,
        source: str = "otel",
        flush_seconds: float = 2.0,
        spool_dir: str | None = None,
    ) -> None:
        self.lake = Lake.of(lake)
        self.source = source
        self.collector = Collector(
            CollectorConfig(
                lake=self.lake.root,
                redaction=redaction or RedactionConfig(),
                assemble=assemble,
                flush_seconds=flush_seconds,
                spool_dir=spool_dir,
            )
        )
        self.collector.start()
        self._shutdown = False

    @property
    def exported(self) -> int:
        """Span rows accepted so far."""
        return self.collector.stats.rows_accepted

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            self.collector.submit(spans_from_sdk(spans, source=self.source).table)
        except Exception:  # the SDK wants a result, not an exception, from its worker thread
            log.exception("exporting %d spans to %s failed", len(spans), self.lake)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write everything spooled to the lake and assemble every trace seen so far."""
        if self._shutdown:
            return True
        try:
            self.collector.flush()
            if self.collector.config.assemble:
                self.collector.assemble_ready(everything=True)
        except Exception:
            log.exception("flushing spans to %s failed (they stay spooled)", self.lake)
            return False
        return True

    def shutdown(self) -> None:
        if not self._shutdown:
            self._shutdown = True
            self.collector.stop()

    def flush_processor(self) -> SpanProcessor:
        """A span processor (add it after the exporter's own) whose `force_flush` flushes this exporter."""
        return _FlushOnForceFlush(self)


class _FlushOnForceFlush(SpanProcessor):
    def __init__(self, exporter: LakeSpanExporter) -> None:
        self.exporter = exporter

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class LakeLogExporter(LogRecordExporter):
    """Export log records that belong to a trace (feedback, GenAI events) into the lake of a
    `LakeSpanExporter`, through its collector: the assembler folds them into their trace."""

    def __init__(self, spans: LakeSpanExporter) -> None:
        self.spans = spans

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if self.spans._shutdown:
            return LogRecordExportResult.FAILURE
        try:
            converted = logs_from_request(encode_logs(batch), source=self.spans.source)
            self.spans.collector.submit(converted.table)
        except Exception:  # the SDK wants a result, not an exception, from its worker thread
            log.exception("exporting %d log records to %s failed", len(batch), self.spans.lake)
            return LogRecordExportResult.FAILURE
        if converted.rejected:
            log.warning("log records not kept: %s", converted.error_message)
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # the span exporter's flush writes what was submitted

    def shutdown(self) -> None:
        return None  # the collector is the span exporter's to stop
