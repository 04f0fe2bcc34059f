"""smolagents weather agent: ToolCallingAgent + OpenAIServerModel, traced by openinference-instrumentation-smolagents.

smolagents ends a run only through its `final_answer` tool, so the scripted model answers
turn 2 with a `final_answer` tool call (carrying the final answer) when that tool is offered.
"""

from __future__ import annotations

from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import corpus_common as c

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
SmolagentsInstrumentor().instrument(tracer_provider=provider)

from smolagents import OpenAIServerModel, ToolCallingAgent, tool  # noqa: E402


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to get the weather for.
    """
    return c.weather(city)


model = OpenAIServerModel(model_id=c.MODEL, api_base=c.LLM_URL, api_key=c.API_KEY, temperature=0.2)
agent = ToolCallingAgent(
    tools=[get_weather],
    model=model,
    name="weather_agent",  # smolagents requires a Python identifier
    description="Answers weather questions.",
    instructions=c.INSTRUCTIONS,
    max_steps=4,
    verbosity_level=0,
)
answer = agent.run(c.QUESTION)
c.report(answer)
provider.shutdown()
