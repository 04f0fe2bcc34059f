"""A scripted OpenAI-compatible chat server playing the shop's hosted production LLM.

This machine reaches no hosted model, so this server plays one over the real chat-completions
protocol: for a customer's question it calls `find_product`, then `check_stock` with the SKU it
got, then answers from the stock. Like a real model it is wrong on a share of questions, in
ways a hurried model is: it answers `in stock` without checking the stock (`skip_rate`), reads
the stock backwards (`misread_rate`), or says `sold out` for a product the shop does not sell
(`confuse_rate`). Run it with `python -m shop.production_llm --port 8001`.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shop.catalog import parse_question

MODEL = "shop-llm-prod"


def _call(rng: random.Random, name: str, arguments: dict[str, str]) -> dict[str, Any]:
    call = {
        "id": f"call_{uuid.UUID(int=rng.getrandbits(128)).hex[:12]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {
        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
        "finish_reason": "tool_calls",
    }


def _say(text: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}


def reply(
    messages: list[dict[str, Any]],
    rng: random.Random,
    skip_rate: float = 0.3,
    misread_rate: float = 0.2,
    confuse_rate: float = 0.3,
) -> dict[str, Any]:
    """The next assistant message (and finish reason) for a conversation so far."""
    question = next(
        (parse_question(str(m.get("content") or "")) for m in messages if m.get("role") == "user"), None
    )
    if question is None:
        return _say("I can only help with our products.")
    results = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    if not results:
        return _call(rng, "find_product", {"query": question.product})
    found = results[0]
    if found == "no match":
        return _say("sold out" if rng.random() < confuse_rate else "not sold here")
    if len(results) == 1:
        if rng.random() < skip_rate:
            return _say("in stock")  # hurried: never checked the stock
        return _call(rng, "check_stock", {"sku": found.removeprefix("SKU ").strip()})
    in_stock = not results[-1].startswith("0 ")
    if rng.random() < misread_rate:
        in_stock = not in_stock
    return _say("in stock" if in_stock else "sold out")


def create_app(seed: int = 0, **rates: float) -> Starlette:
    """The ASGI app: `POST /v1/chat/completions` and `GET /v1/models`. `rates`: `reply`'s."""
    rng = random.Random(seed)

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not messages:
            return JSONResponse(
                {"error": {"message": "`messages` is required", "type": "invalid_request_error"}}, 400
            )
        choice = reply(messages, rng, **rates)
        prompt_tokens = sum(len(str(m.get("content") or "").split()) + 4 for m in messages)
        completion_tokens = len(json.dumps(choice["message"]).split())
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": MODEL,
                "choices": [{"index": 0, **choice}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--seed", type=int, default=0, help="seed of its mistakes")
    args = parser.parse_args()
    uvicorn.run(create_app(args.seed), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
