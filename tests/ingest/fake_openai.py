"""A scripted OpenAI-compatible chat-completions server on loopback, for driving the real `openai` client.

It speaks the real wire protocol (`POST /v1/chat/completions`, JSON in and out) and
answers a tool-using agent's two turns: when the last message is from the user and
tools are offered, it calls `get_weather`; once a tool result is in the history it
gives the final answer. Usage numbers are fixed so tests can check the sums.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.background import free_port

MODEL = "gpt-4o-mini-2024-07-18"
TOOL_CALL_ID = "call_weather_1"
TOOL_ARGUMENTS = '{"city": "Paris"}'
FINAL_ANSWER = "It is rainy and 14 degrees in Paris."
USAGE = [(40, 12), (70, 9)]  # (prompt, completion) tokens of turn 1 and turn 2

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


async def chat_completions(request: Request) -> JSONResponse:
    body = await request.json()
    messages = body.get("messages", [])
    wants_tool = bool(body.get("tools")) and not any(m.get("role") == "tool" for m in messages)
    if wants_tool:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": TOOL_CALL_ID,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": TOOL_ARGUMENTS},
                }
            ],
        }
        finish, (prompt, completion) = "tool_calls", USAGE[0]
    else:
        message = {"role": "assistant", "content": FINAL_ANSWER}
        finish, (prompt, completion) = "stop", USAGE[1]
    return JSONResponse(
        {
            "id": f"chatcmpl-{len(messages)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


def create_app() -> Starlette:
    return Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"])])


@contextmanager
def serve_in_thread(app: object, port: int | None = None) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port; yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"uvicorn did not start on 127.0.0.1:{port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def run_agent(
    base_url: str,
    model: str = "gpt-4o-mini",
    tracer: object | None = None,
    openai_module: object | None = None,
    on_tool: object | None = None,
) -> str:
    """The two-turn tool-using agent: ask, run the tool the model asks for, answer.

    With a `tracer`, the tool execution gets its own `execute_tool` span (GenAI semconv);
    `on_tool(name, call_id, arguments, result)` records it any other way (Langfuse);
    `openai_module` swaps in a wrapped client module (`langfuse.openai`).
    """
    if openai_module is None:
        import openai as openai_module

    client = openai_module.OpenAI(  # type: ignore[attr-defined]
        base_url=f"{base_url}/v1", api_key="sk-test-not-a-real-key-000000000000"
    )
    messages: list[dict] = [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER_TOOL], temperature=0.2
    )
    call = first.choices[0].message.tool_calls[0]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        }
    )
    result = json.dumps(
        {"city": json.loads(call.function.arguments)["city"], "weather": "rainy", "celsius": 14}
    )
    if tracer is not None:
        with tracer.start_as_current_span(f"execute_tool {call.function.name}") as span:  # type: ignore[attr-defined]
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", call.function.name)
            span.set_attribute("gen_ai.tool.call.id", call.id)
            span.set_attribute("gen_ai.tool.call.arguments", call.function.arguments)
            span.set_attribute("gen_ai.tool.call.result", result)
    if on_tool is not None:
        on_tool(call.function.name, call.id, call.function.arguments, result)  # type: ignore[operator]
    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    second = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER_TOOL], temperature=0.2
    )
    return second.choices[0].message.content or ""
