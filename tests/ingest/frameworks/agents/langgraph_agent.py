"""LangGraph weather agent (`create_react_agent` + `ChatOpenAI(base_url=...)`), three tracings.

CORPUS_TRACING=openinference: openinference-instrumentation-langchain on the OTel SDK;
CORPUS_TRACING=openllmetry: opentelemetry-instrumentation-langchain (OpenLLMetry) on the OTel SDK;
CORPUS_TRACING=traceloop: `Traceloop.init(api_endpoint=<recorder>)` (instruments LangChain and openai,
also sends metrics). The thread id (checkpointer) is the session, `metadata.user_id` the user.
CORPUS_STREAM=1: ChatOpenAI(streaming=True, stream_usage=True) and `graph.stream(...)`.
"""

from __future__ import annotations

import os

import corpus_common as c

TRACING = os.environ.get("CORPUS_TRACING", "openinference")

if TRACING == "traceloop":
    from traceloop.sdk import Traceloop

    Traceloop.init(app_name="weather-agent-corpus", api_endpoint=c.RECORDER_URL, disable_batch=True)
    Traceloop.set_association_properties({"user_id": c.USER_ID, "session_id": c.SESSION_ID})

    def shutdown() -> None:
        from opentelemetry import metrics, trace

        trace.get_tracer_provider().force_flush()
        trace.get_tracer_provider().shutdown()
        meter_provider = metrics.get_meter_provider()
        if hasattr(meter_provider, "shutdown"):
            meter_provider.force_flush()
            meter_provider.shutdown()
else:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    if TRACING == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
    shutdown = provider.shutdown

from langchain_core.messages import SystemMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402


@tool(description=c.TOOL_DESCRIPTION)
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return c.weather(city)


llm = ChatOpenAI(
    model=c.MODEL,
    base_url=c.LLM_URL,
    api_key=c.API_KEY,
    temperature=0.2,
    streaming=c.STREAM,
    stream_usage=True,
)
graph = create_react_agent(
    llm,
    tools=[get_weather],
    prompt=SystemMessage(content=c.INSTRUCTIONS),
    checkpointer=InMemorySaver(),
    name=c.AGENT_NAME,
)
config = {"configurable": {"thread_id": c.SESSION_ID}, "metadata": {"user_id": c.USER_ID}}
inputs = {"messages": [{"role": "user", "content": c.QUESTION}]}
if c.STREAM:
    for _ in graph.stream(inputs, config=config, stream_mode="values"):
        pass
    state = graph.get_state(config).values
else:
    state = graph.invoke(inputs, config=config)
c.report(state["messages"][-1].content)
shutdown()
