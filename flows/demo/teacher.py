"""A scripted OpenAI-compatible chat server standing in for the hosted production LLM.

The demo's production agent needs a competent model, and this machine can reach none,
so this server plays one over the real chat-completions protocol on loopback: for a
user question it calls the right calculator tool, and after the tool result it answers
with the number. A configurable share of answers is wrong, like a real model's, so the
lake holds failures too (and user feedback that says so); on word problems it also misreads
a share of them into the wrong expression (`Question.misread`), as a hurried model would.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.demo.task import parse_question

TEACHER_MODEL = "production-llm-1"


def reply(
    messages: list[dict[str, Any]], rng: random.Random, error_rate: float, misread_rate: float = 0.0
) -> dict[str, Any]:
    """The assistant message (and finish reason) the production model gives next.

    `misread_rate`: the share of word problems whose expression it gets wrong (a draw is taken
    only for a word problem, so the simple task's seeded mistakes stay where they were)."""
    last = messages[-1]
    if last.get("role") == "tool":
        answer = str(last.get("content", "")).strip()
        if rng.random() < error_rate and answer.lstrip("-").isdigit():
            answer = str(int(answer) + rng.choice((-2, -1, 1, 2)))
        return {"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
    question = next(
        (parse_question(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), None
    )
    if question is None:
        return {
            "message": {"role": "assistant", "content": "I can only do arithmetic."},
            "finish_reason": "stop",
        }
    expression = question.expression
    if question.misread is not None and rng.random() < misread_rate:
        expression = question.misread
    call = {
        "id": f"call_{uuid.UUID(int=rng.getrandbits(128)).hex[:12]}",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
    }
    return {
        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
        "finish_reason": "tool_calls",
    }


def create_app(seed: int = 0, error_rate: float = 0.15, misread_rate: float = 0.35) -> Starlette:
    """The ASGI app: `POST /v1/chat/completions` and `GET /v1/models`."""
    rng = random.Random(seed)

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body.get("messages") or []
        if not messages:
            return JSONResponse(
                {"error": {"message": "`messages` is required", "type": "invalid_request_error"}}, 400
            )
        choice = reply(messages, rng, error_rate, misread_rate)
        prompt_tokens = sum(len(str(m.get("content") or "").split()) + 4 for m in messages)
        completion_tokens = len(json.dumps(choice["message"]).split())
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": TEACHER_MODEL,
                "choices": [{"index": 0, **choice}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": TEACHER_MODEL, "object": "model"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    )
