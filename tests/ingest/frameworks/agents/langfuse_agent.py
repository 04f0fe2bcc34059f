"""Langfuse Python SDK v5 weather agent: `@observe` agent and tool, `langfuse.openai` drop-in, scores.

Langfuse reads LANGFUSE_HOST / LANGFUSE_BASE_URL, LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY from the
environment (pointed at the recorder) and exports OTLP/HTTP to `/api/public/otel/v1/traces`;
scores go to `/api/public/scores`. The trace gets user and session ids via
`propagate_attributes`. CORPUS_STREAM=1 streams the chat completions (include_usage).
"""

from __future__ import annotations

import json

from langfuse import get_client, observe, propagate_attributes
from langfuse.openai import OpenAI

import corpus_common as c

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": c.TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city to get the weather for."}},
                "required": ["city"],
            },
        },
    }
]

client = OpenAI(base_url=c.LLM_URL, api_key=c.API_KEY)


@observe(name="get_weather", as_type="tool")
def get_weather(city: str) -> str:
    return c.weather(city)


def complete(messages: list[dict]) -> dict:
    """One model call; returns the assistant message as a dict (assembling streamed chunks)."""
    if not c.STREAM:
        response = client.chat.completions.create(
            model=c.MODEL, messages=messages, tools=TOOLS, temperature=0.2, name="weather-llm"
        )
        return response.choices[0].message.model_dump(exclude_none=True)
    message: dict = {"role": "assistant", "content": ""}
    calls: dict[int, dict] = {}
    stream = client.chat.completions.create(
        model=c.MODEL,
        messages=messages,
        tools=TOOLS,
        temperature=0.2,
        stream=True,
        stream_options={"include_usage": True},
        name="weather-llm",
    )
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                message["content"] += delta.content
            for call in delta.tool_calls or []:
                slot = calls.setdefault(
                    call.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["function"]["name"] = call.function.name
                if call.function and call.function.arguments:
                    slot["function"]["arguments"] += call.function.arguments
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
        message["content"] = message["content"] or None
    return message


@observe(name=c.AGENT_NAME, as_type="agent")
def weather_agent(question: str) -> str:
    global TRACE_ID
    TRACE_ID = get_client().get_current_trace_id()
    with propagate_attributes(user_id=c.USER_ID, session_id=c.SESSION_ID, trace_name=c.AGENT_NAME):
        messages: list[dict] = [
            {"role": "system", "content": c.INSTRUCTIONS},
            {"role": "user", "content": question},
        ]
        for _ in range(4):
            message = complete(messages)
            messages.append(message)
            if not message.get("tool_calls"):
                return message.get("content") or ""
            for call in message["tool_calls"]:
                result = get_weather(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return ""


TRACE_ID: str | None = None
langfuse = get_client()
answer = weather_agent(c.QUESTION)
langfuse.create_score(
    name="user_feedback", value=1.0, trace_id=TRACE_ID, comment="thumbs up", data_type="NUMERIC"
)
langfuse.create_score(name="tone", value="friendly", trace_id=TRACE_ID, data_type="CATEGORICAL")
langfuse.flush()
langfuse.shutdown()
c.report(answer, trace_id=TRACE_ID)
