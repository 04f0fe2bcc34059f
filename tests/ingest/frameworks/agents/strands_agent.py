"""Strands Agents weather agent with its native OpenTelemetry tracing and metrics.

`StrandsTelemetry().setup_otlp_exporter()` + `.setup_meter(enable_otlp_exporter=True)`: OTLP/HTTP to
OTEL_EXPORTER_OTLP_ENDPOINT. OpenAIModel (chat completions, streaming by default) or, with
CORPUS_MODEL_API=responses, OpenAIResponsesModel. Session and user ids via trace_attributes
(`session.id`, `user.id`, as Strands' docs show). OTEL_SEMCONV_STABILITY_OPT_IN picks the semconv.
"""

from __future__ import annotations

import os

from strands import Agent, tool
from strands.telemetry import StrandsTelemetry

import corpus_common as c

telemetry = StrandsTelemetry().setup_otlp_exporter().setup_meter(enable_otlp_exporter=True)

if os.environ.get("CORPUS_MODEL_API") == "responses":
    from strands.models.openai_responses import OpenAIResponsesModel

    model = OpenAIResponsesModel(
        client_args={"base_url": c.LLM_URL, "api_key": c.API_KEY},
        model_id=c.MODEL,
        params={"temperature": 0.2},
    )
else:
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(
        client_args={"base_url": c.LLM_URL, "api_key": c.API_KEY},
        model_id=c.MODEL,
        params={"temperature": 0.2},
    )


@tool(description=c.TOOL_DESCRIPTION)
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to get the weather for.
    """
    return c.weather(city)


agent = Agent(
    model=model,
    name=c.AGENT_NAME,
    system_prompt=c.INSTRUCTIONS,
    tools=[get_weather],
    trace_attributes={"session.id": c.SESSION_ID, "user.id": c.USER_ID},
    callback_handler=None,
)
result = agent(c.QUESTION)
c.report(str(result).strip())
telemetry.tracer_provider.force_flush()
telemetry.tracer_provider.shutdown()
from opentelemetry import metrics  # noqa: E402

meter_provider = metrics.get_meter_provider()
if hasattr(meter_provider, "shutdown"):
    meter_provider.shutdown()
