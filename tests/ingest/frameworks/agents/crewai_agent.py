"""CrewAI weather crew: one Agent with a `get_weather` tool, one Task, traced by OpenInference.

openinference-instrumentation-crewai traces the crew, task and agent; openinference-instrumentation-openai
the model calls (CrewAI's native OpenAI provider uses the openai SDK). CrewAI's own telemetry and
hosted tracing are switched off by env vars (capture.py).
"""

from __future__ import annotations

from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import corpus_common as c

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
CrewAIInstrumentor().instrument(tracer_provider=provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)

from crewai import LLM, Agent, Crew, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402


@tool("get_weather")
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return c.weather(city)


llm = LLM(model=f"openai/{c.MODEL}", base_url=c.LLM_URL, api_key=c.API_KEY, temperature=0.2)
agent = Agent(
    role=c.AGENT_NAME,
    goal="Answer weather questions using the get_weather tool.",
    backstory=c.INSTRUCTIONS,
    tools=[get_weather],
    llm=llm,
    verbose=False,
    max_iter=4,
)
task = Task(description=c.QUESTION, expected_output="One sentence about the weather.", agent=agent)
crew = Crew(agents=[agent], tasks=[task], verbose=False)
result = crew.kickoff()
c.report(str(result.raw))
provider.shutdown()
