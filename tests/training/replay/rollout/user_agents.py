"""User rollout functions used by the tests, written against the plain `openai` SDK."""

from __future__ import annotations

import json
from typing import Any

from tests.training.helpers import calculator


async def async_agent(client: Any, scenario: Any) -> str | None:
    """A typical tool-using agent loop with `openai.AsyncOpenAI`."""
    messages = scenario.openai_messages()
    for _ in range(4):
        response = await client.chat.completions.create(
            model="policy", messages=messages, tools=scenario.tools, logprobs=True, max_tokens=64
        )
        choice = response.choices[0]
        assert choice.logprobs is not None and len(choice.logprobs.content) == len(choice.token_ids)
        message = choice.message
        if not message.tool_calls:
            return message.content
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            result = calculator(**json.loads(call.function.arguments))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "name": call.function.name,
                    "content": json.dumps(result),
                }
            )
    return None


def sync_agent(client: Any, scenario: Any) -> str | None:
    """The same agent with the synchronous `openai.OpenAI` client (served on a loopback port)."""
    messages = scenario.openai_messages()
    response = client.chat.completions.create(
        model="policy", messages=messages, tools=scenario.tools, max_tokens=64
    )
    call = response.choices[0].message.tool_calls[0]
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        }
    )
    messages.append(
        {
            "role": "tool",
            "tool_call_id": call.id,
            "name": "calculator",
            "content": json.dumps(calculator(**json.loads(call.function.arguments))),
        }
    )
    response = client.chat.completions.create(
        model="policy", messages=messages, tools=scenario.tools, max_tokens=64
    )
    return response.choices[0].message.content


async def failing_agent(client: Any, scenario: Any) -> str:
    await client.chat.completions.create(model="policy", messages=scenario.openai_messages(), max_tokens=8)
    raise RuntimeError("agent crashed after one call")


async def looping_agent(client: Any, scenario: Any) -> str:
    """Never stops calling the model: the turn limit ends it."""
    while True:
        await client.chat.completions.create(
            model="policy", messages=scenario.openai_messages(), max_tokens=8
        )


async def cold_agent(client: Any, scenario: Any) -> str | None:
    """An agent that sets its own sampling (temperature 0.2, top_p 0.5) on its one call."""
    response = await client.chat.completions.create(
        model="policy",
        messages=scenario.openai_messages(),
        tools=scenario.tools,
        max_tokens=64,
        temperature=0.2,
        top_p=0.5,
    )
    return response.choices[0].message.content
