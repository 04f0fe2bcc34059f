"""LlamaIndex weather agent: FunctionAgent + llama_index OpenAI(api_base=<scripted>), openinference tracing.

FunctionAgent streams the model's answer by default (chat-completions SSE). Context carries no
session notion; none is sent.
"""

from __future__ import annotations

import asyncio

from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import corpus_common as c

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
LlamaIndexInstrumentor().instrument(tracer_provider=provider)

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.llms.openai import OpenAI  # noqa: E402


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return c.weather(city)


agent = FunctionAgent(
    name=c.AGENT_NAME,
    description="Answers weather questions.",
    system_prompt=c.INSTRUCTIONS,
    tools=[FunctionTool.from_defaults(fn=get_weather, name="get_weather", description=c.TOOL_DESCRIPTION)],
    llm=OpenAI(model=c.MODEL, api_base=c.LLM_URL, api_key=c.API_KEY, temperature=0.2),
)


async def main() -> None:
    response = await agent.run(user_msg=c.QUESTION)
    c.report(str(response))


asyncio.run(main())
provider.shutdown()
