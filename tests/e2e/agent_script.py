"""A tool-using agent instrumented by a real third-party library, exporting over real OTLP/HTTP.

Run as a subprocess by the tests (instrumentors patch `openai` globally, so each library
gets a fresh interpreter):

    python -m tests.e2e.agent_script LIBRARY OPENAI_URL COLLECTOR_URL GZIP

LIBRARY is `openai-v2` (GenAI semconv, content on span attributes), `openai-v2-events`
(the deprecated per-message events, sent to /v1/logs), `openinference` or `openllmetry`.
Prints the trace id on stdout.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    library, openai_url, collector_url, gzip = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    if library == "openai-v2-events":
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "EVENT_ONLY"
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    else:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from tests.ingest.fake_openai import WEATHER_TOOL, run_agent

    compression = Compression.Gzip if gzip else Compression.NoCompression
    resource = Resource.create({"service.name": f"weather-agent-{library}"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{collector_url}/v1/traces", compression=compression))
    )
    trace.set_tracer_provider(provider)
    logger_provider = None
    if library in ("openai-v2", "openai-v2-events"):
        from opentelemetry._logs import set_logger_provider
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                OTLPLogExporter(endpoint=f"{collector_url}/v1/logs", compression=compression)
            )
        )
        set_logger_provider(logger_provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logger_provider)
    elif library == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif library == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    else:
        raise SystemExit(f"unknown library `{library}`")

    tracer = provider.get_tracer("weather-agent")
    with tracer.start_as_current_span("invoke_agent weather-agent") as span:
        span.set_attribute("gen_ai.operation.name", "invoke_agent")
        span.set_attribute("gen_ai.agent.name", "weather-agent")
        span.set_attribute("gen_ai.conversation.id", "conv-42")
        span.set_attribute("user.id", "user-7")
        # The agent declares its tools (opt-in semconv attribute): instrumentations that do
        # not record tool definitions on chat spans still yield them this way.
        span.set_attribute("gen_ai.tool.definitions", json.dumps([WEATHER_TOOL]))
        run_agent(openai_url, tracer=tracer)
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.force_flush()
    provider.shutdown()
    if logger_provider is not None:
        logger_provider.force_flush()
        logger_provider.shutdown()
    print(trace_id)


if __name__ == "__main__":
    main()
