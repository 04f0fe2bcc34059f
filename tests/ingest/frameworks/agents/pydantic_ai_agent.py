"""pydantic-ai weather agent with pydantic-ai's own OpenTelemetry instrumentation.

Default: OTel SDK TracerProvider + OTLPSpanExporter (endpoint from OTEL_EXPORTER_OTLP_ENDPOINT),
`Agent.instrument_all()` (pydantic-ai's built-in instrumentation, default version).
CORPUS_LOGFIRE=1: `logfire.configure(send_to_logfire=False)` + `logfire.instrument_pydantic_ai()`,
logfire exporting to OTEL_EXPORTER_OTLP_ENDPOINT (traces, logs, metrics).
CORPUS_MODEL_API=responses: OpenAIResponsesModel; CORPUS_STREAM=1: run_stream_events.
"""

from __future__ import annotations

import asyncio
import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

import corpus_common as c

LOGFIRE = os.environ.get("CORPUS_LOGFIRE") == "1"

if LOGFIRE:
    import logfire

    logfire.configure(send_to_logfire=False, service_name="weather-agent-corpus", console=False)
    logfire.instrument_pydantic_ai()
    shutdown = logfire.shutdown
else:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    Agent.instrument_all()
    shutdown = provider.shutdown

openai_provider = OpenAIProvider(base_url=c.LLM_URL, api_key=c.API_KEY)
if os.environ.get("CORPUS_MODEL_API") == "responses":
    model = OpenAIResponsesModel(c.MODEL, provider=openai_provider)
else:
    model = OpenAIChatModel(c.MODEL, provider=openai_provider)

agent = Agent(model, name=c.AGENT_NAME, instructions=c.INSTRUCTIONS, model_settings={"temperature": 0.2})


@agent.tool_plain(description=c.TOOL_DESCRIPTION)
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to get the weather for.
    """
    return c.weather(city)


async def main() -> None:
    if c.STREAM:
        answer = None
        async with agent.run_stream_events(c.QUESTION) as stream:
            async for event in stream:
                if type(event).__name__ == "AgentRunResultEvent":
                    answer = event.result.output
    else:
        answer = (await agent.run(c.QUESTION)).output
    c.report(answer)


asyncio.run(main())
shutdown()
