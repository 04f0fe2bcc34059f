"""openai-agents SDK weather agent, traced by openinference-instrumentation-openai-agents.

CORPUS_MODEL_API=responses uses OpenAIResponsesModel (else OpenAIChatCompletionsModel);
CORPUS_STREAM=1 runs it with Runner.run_streamed. OTLP/HTTP protobuf to
OTEL_EXPORTER_OTLP_ENDPOINT (the SDK's default exporter reads it).
"""

from __future__ import annotations

import asyncio
import os

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import corpus_common as c

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


@function_tool(description_override=c.TOOL_DESCRIPTION)
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to get the weather for.
    """
    return c.weather(city)


async def main() -> None:
    client = AsyncOpenAI(base_url=c.LLM_URL, api_key=c.API_KEY)
    if os.environ.get("CORPUS_MODEL_API") == "responses":
        model = OpenAIResponsesModel(model=c.MODEL, openai_client=client)
    else:
        model = OpenAIChatCompletionsModel(model=c.MODEL, openai_client=client)
    agent = Agent(
        name=c.AGENT_NAME,
        instructions=c.INSTRUCTIONS,
        model=model,
        tools=[get_weather],
        model_settings=ModelSettings(include_usage=True, temperature=0.2),
    )
    run_config = RunConfig(
        workflow_name="weather-workflow",
        group_id=c.SESSION_ID,
        trace_metadata={"user_id": c.USER_ID},
    )
    if c.STREAM:
        result = Runner.run_streamed(agent, c.QUESTION, run_config=run_config)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, c.QUESTION, run_config=run_config)
    c.report(result.final_output)


asyncio.run(main())
provider.shutdown()
