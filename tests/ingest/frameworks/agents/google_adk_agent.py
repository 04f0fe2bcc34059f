"""Google ADK weather agent: LlmAgent + LiteLlm("openai/gpt-4o-mini", api_base=<scripted>), ADK's own telemetry.

Telemetry is set up the way ADK's own servers do it: `maybe_set_otel_providers()` adds OTLP/HTTP
exporters for traces, metrics and logs from OTEL_EXPORTER_OTLP_ENDPOINT. What goes where is
steered by ADK's env vars (ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS,
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, OTEL_SEMCONV_STABILITY_OPT_IN), set per
configuration in capture.py. The session (user "user-7", session "conv-42") is ADK's
InMemorySessionService's. CORPUS_TOOL_FAILS=1 makes the tool raise (the failing run).
"""

from __future__ import annotations

import asyncio

from google.adk.telemetry.setup import maybe_set_otel_providers

maybe_set_otel_providers()

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.lite_llm import LiteLlm  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402

import corpus_common as c  # noqa: E402


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to get the weather for.
    """
    return c.weather(city)


agent = LlmAgent(
    name="weather_agent",  # ADK requires a Python identifier
    model=LiteLlm(model=f"openai/{c.MODEL}", api_base=c.LLM_URL, api_key=c.API_KEY),
    description="Answers weather questions.",
    instruction=c.INSTRUCTIONS,
    tools=[get_weather],
    generate_content_config=types.GenerateContentConfig(temperature=0.2),
)


async def main() -> None:
    sessions = InMemorySessionService()
    runner = Runner(app_name="weather_app", agent=agent, session_service=sessions)
    await sessions.create_session(app_name="weather_app", user_id=c.USER_ID, session_id=c.SESSION_ID)
    answer = None
    error = None
    try:
        async for event in runner.run_async(
            user_id=c.USER_ID,
            session_id=c.SESSION_ID,
            new_message=types.Content(role="user", parts=[types.Part(text=c.QUESTION)]),
        ):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts) or answer
    except Exception as exc:  # the failing run: report what the framework raised
        error = f"{type(exc).__name__}: {exc}"
    finally:
        await runner.close()
    c.report(answer, error=error)


asyncio.run(main())

from opentelemetry import _logs, metrics, trace  # noqa: E402

for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider()):
    if hasattr(provider, "force_flush"):
        provider.force_flush()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
