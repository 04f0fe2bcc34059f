"""A tool-using agent's traces for the stand-in Langfuse: `seed_agent_trace` adds one run (root
agent span, a generation that calls `get_weather`, the tool observation, the final-answer
generation) to a `StandinLangfuse`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from tests.ingest.langfuse.standin import StandinLangfuse, iso

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SYSTEM = "You are a weather assistant. Use tools."


def seed_agent_trace(
    standin: StandinLangfuse,
    trace_id: str,
    start: datetime,
    *,
    city: str = "Paris",
    weather: str = "rainy, 14C",
    user_id: str = "u-1",
    session_id: str = "s-1",
    environment: str = "production",
    name: str = "weather-agent",
    tags: tuple[str, ...] = ("prod", "weather"),
    tool_error: bool = False,
    include: tuple[str, ...] = ("root", "gen1", "tool", "gen2"),
) -> dict[str, str]:
    """One run of a tool-using agent: root agent span, a generation that calls a tool, the
    tool observation, and the final-answer generation. Returns the observation ids."""
    standin.add_trace(
        trace_id, name=name, userId=user_id, sessionId=session_id, environment=environment, tags=list(tags)
    )
    ids = {
        part: f"{trace_id[:12]}{n:04x}" for n, part in enumerate(("root", "gen1", "tool", "gen2"), start=1)
    }
    call_id = f"call_{trace_id[:8]}"
    question = f"What is the weather in {city}?"
    answer = f"It is {weather} in {city}."
    user = {"role": "user", "content": question}
    system = {"role": "system", "content": SYSTEM}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": call_id, "content": weather}
    t = lambda s: iso(start + timedelta(seconds=s))  # noqa: E731
    parts = {
        "root": dict(
            id=ids["root"],
            traceId=trace_id,
            type="AGENT",
            name=name,
            startTime=t(0),
            endTime=t(4),
            input={"question": question},
            output=answer,
        ),
        "gen1": dict(
            id=ids["gen1"],
            traceId=trace_id,
            type="GENERATION",
            name="chat gpt-4o",
            parentObservationId=ids["root"],
            startTime=t(0.1),
            endTime=t(1),
            completionStartTime=t(0.5),
            model="gpt-4o",
            modelParameters={"temperature": 0.2},
            input={"messages": [system, user], "tools": [WEATHER_TOOL]},
            output=call,
            usageDetails={"input": 120, "output": 20, "total": 140},
            costDetails={"total": 0.001},
            latency=0.9,
        ),
        "tool": dict(
            id=ids["tool"],
            traceId=trace_id,
            type="TOOL",
            name="get_weather",
            parentObservationId=ids["root"],
            startTime=t(1.1),
            endTime=t(1.5),
            input={"city": city},
            output=weather if not tool_error else None,
            level="ERROR" if tool_error else "DEFAULT",
            statusMessage="timeout" if tool_error else None,
            metadata={"tool_call_id": call_id},
        ),
        "gen2": dict(
            id=ids["gen2"],
            traceId=trace_id,
            type="GENERATION",
            name="chat gpt-4o",
            parentObservationId=ids["root"],
            startTime=t(2),
            endTime=t(3.5),
            model="gpt-4o",
            modelParameters={"temperature": 0.2},
            input={"messages": [system, user, call, result], "tools": [WEATHER_TOOL]},
            output={"role": "assistant", "content": answer},
            usageDetails={"input": 160, "output": 15, "total": 175},
        ),
    }
    for part in include:
        obs = {k: v for k, v in parts[part].items() if v is not None}
        standin.add_observation(**obs)
    return ids
