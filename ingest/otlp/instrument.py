"""`instrument(...)`: the one call a production agent makes to send its traces and feedback to trajlake.

It builds a `TracerProvider` for `service_name` and a `LoggerProvider` beside it (log
records carry what happens after a span ended: the user's feedback, `ingest.feedback`),
exports both either over OTLP/HTTP to a running `trajlake collect` (`endpoint=`:
`/v1/traces` and `/v1/logs`) or straight into a lake in-process (`lake=`), turns GenAI
content capture on (message content on span attributes, the current semantic
conventions) and, when the OpenTelemetry OpenAI instrumentation is installed,
instruments the `openai` client.

>>> provider = instrument(endpoint="http://127.0.0.1:4318", service_name="support-agent")  # doctest: +SKIP
>>> ...  # run the agent, then `ingest.feedback(1.0, trace_id=...)` when the user rates it  # doctest: +SKIP
>>> provider.force_flush()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import threading

from opentelemetry import _logs, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from ingest.errors import InstrumentError
from ingest.otlp.exporter import LakeLogExporter, LakeSpanExporter
from ingest.redact import RedactionConfig
from store.lake import Lake

log = logging.getLogger("trajlake.ingest.otlp.instrument")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
STABILITY_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"


def enable_content_capture() -> None:
    """Ask GenAI instrumentations for message content on span attributes (latest conventions).

    These switches are read by the instrumentation libraries themselves, so they are set
    in the process environment; values the user already set are respected.
    """
    os.environ.setdefault(CAPTURE_CONTENT, "SPAN_ONLY")
    opt_in = [v for v in os.environ.get(STABILITY_OPT_IN, "").split(",") if v]
    if "gen_ai_latest_experimental" not in opt_in:
        os.environ[STABILITY_OPT_IN] = ",".join([*opt_in, "gen_ai_latest_experimental"])


def collector_base(endpoint: str) -> str:
    """The collector's base URL from a base URL or a full signal URL.

    >>> collector_base("http://127.0.0.1:4318/v1/traces/")
    'http://127.0.0.1:4318'
    """
    url = endpoint.rstrip("/")
    for signal in ("/v1/traces", "/v1/logs"):
        url = url.removesuffix(signal)
    return url


def otlp_exporter(endpoint: str, headers: dict[str, str] | None = None, *, gzip: bool = True) -> SpanExporter:
    """The standard OTLP/HTTP protobuf exporter pointed at a collector base URL or a full /v1/traces URL."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=f"{collector_base(endpoint)}/v1/traces",
        headers=headers,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )


def otlp_log_exporter(
    endpoint: str, headers: dict[str, str] | None = None, *, gzip: bool = True
) -> LogRecordExporter:
    """The standard OTLP/HTTP protobuf log exporter pointed at the same collector's `/v1/logs`."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OTLPLogExporter(
        endpoint=f"{collector_base(endpoint)}/v1/logs",
        headers=headers,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )


class InstrumentedProvider(TracerProvider):
    """The `TracerProvider` `instrument()` returns; `logger_provider` sends log records (the
    user's feedback: `ingest.feedback(..., provider=...)`) to the same destination, and
    `force_flush()` and `shutdown()` reach it too."""

    logger_provider: LoggerProvider


class _LogsAlongside(SpanProcessor):
    """Flushes and shuts down the logger provider with the tracer provider. It is added first:
    in-process, log records must reach the collector before the span exporter's flush writes
    and assembles, and before its shutdown stops the collector."""

    def __init__(self, logger_provider: LoggerProvider) -> None:
        self.logger_provider = logger_provider

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.logger_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.logger_provider.shutdown()


def instrument(
    lake: Lake | str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    *,
    service_name: str = "agent",
    headers: dict[str, str] | None = None,
    gzip: bool = True,
    capture_content: bool = True,
    instrument_openai: bool = True,
    batch: bool = True,
    set_global: bool = True,
    redaction: RedactionConfig | None = None,
    resource_attributes: dict[str, str] | None = None,
    id_generator: IdGenerator | None = None,
) -> InstrumentedProvider:
    """A ready `TracerProvider` exporting to a collector (`endpoint`) or into a lake (`lake`), with
    a `LoggerProvider` (its `logger_provider`) exporting feedback to the same place.

    `batch=False` exports each span and record as it ends (handy in tests and short scripts);
    `set_global` installs both providers as the process's global ones (`ingest.feedback` then
    needs no `provider=`); `id_generator` (the SDK's random one by default) gives seeded runs
    reproducible trace ids. Call `provider.force_flush()` (or `shutdown()`) before the process
    exits: it flushes the feedback too.
    """
    if (lake is None) == (endpoint is None):
        raise InstrumentError(
            "pass exactly one destination: `endpoint=` (a running `trajlake collect`, e.g. "
            "http://127.0.0.1:4318) or `lake=` (write in-process)"
        )
    if capture_content:
        enable_content_capture()
    exporter: SpanExporter
    log_exporter: LogRecordExporter
    if endpoint is not None:
        exporter = otlp_exporter(endpoint, headers, gzip=gzip)
        log_exporter = otlp_log_exporter(endpoint, headers, gzip=gzip)
    else:
        exporter = LakeSpanExporter(lake, redaction=redaction)  # type: ignore[arg-type]
        log_exporter = LakeLogExporter(exporter)
    resource = Resource.create({"service.name": service_name, **(resource_attributes or {})})
    # Shut down by the tracer provider (`_LogsAlongside`), first: not by an exit hook of its own.
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(log_exporter) if batch else SimpleLogRecordProcessor(log_exporter)
    )
    provider = InstrumentedProvider(resource=resource, id_generator=id_generator)
    provider.logger_provider = logger_provider
    provider.add_span_processor(_LogsAlongside(logger_provider))
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    if isinstance(exporter, LakeSpanExporter):
        provider.add_span_processor(exporter.flush_processor())  # provider.force_flush() reaches the lake
    if set_global:
        trace.set_tracer_provider(provider)
        _logs.set_logger_provider(logger_provider)
    if lake is not None:
        _shutdown_before_thread_pools(provider)
    if instrument_openai:
        _instrument_openai(provider)
    return provider


def _shutdown_before_thread_pools(provider: TracerProvider) -> None:
    # The SDK shuts the provider down from `atexit`, but by then `concurrent.futures` has
    # stopped accepting work, and the lake writer encodes Parquet on a thread pool: the last
    # batch would be lost. `threading` runs its own exit hooks in reverse registration
    # order before `atexit`, so a hook registered now runs before the pools close.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(provider.shutdown)


def _instrument_openai(provider: TracerProvider) -> None:
    try:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    except ImportError as exc:  # optional: the agent may use another instrumentation
        log.info(
            "opentelemetry-instrumentation-openai-v2 not usable (%s); openai calls not instrumented", exc
        )
        return
    instrumentor = OpenAIInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=provider)
