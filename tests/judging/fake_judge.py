"""A stand-in judge on loopback that speaks the OpenAI chat-completions protocol.

It ranks by a deterministic rule: each trajectory's score is `min(1, n / 4)` where `n`
is how many times the word "good" appears in its `<trajectory>` block. Scores are
returned in reverse label order (so a client that matched by position would be wrong).

Faults are queued per request (`judge.faults.extend([...])`, consumed one per call) or
set permanently (`judge.always = "500"`): `429` (Retry-After: 0), `500`, `timeout`
(sleeps past the client's timeout), `invalid_json`, `missing_id`, `extra_id`,
`out_of_range`, `401`, `prose` (valid JSON inside a fenced block with text around it).
`supports_schema=False` answers 400 to `response_format: json_schema`, like servers
without structured output.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.DOTALL)


def rule_score(block: str) -> float:
    """The deterministic rule the stand-in judge ranks by."""
    return min(1.0, block.count("good") / 4)


@dataclass
class FakeJudge:
    delay_s: float = 0.0
    supports_schema: bool = True
    always: str | None = None
    faults: deque[str] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0  # 200 responses sent (valid or not)
    in_flight: int = 0
    max_in_flight: int = 0
    timeout_sleep_s: float = 5.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(body)
            fault = self.always or (self.faults.popleft() if self.faults else None)
        fmt = (body.get("response_format") or {}).get("type")
        if fmt == "json_schema" and not self.supports_schema:
            return (
                400,
                {
                    "error": {
                        "message": "response_format json_schema is not supported",
                        "type": "invalid_request_error",
                    }
                },
                {},
            )
        if fault == "429":
            return 429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"retry-after": "0"}
        if fault == "500":
            return 500, {"error": {"message": "upstream exploded", "type": "server_error"}}, {}
        if fault == "401":
            return 401, {"error": {"message": "bad key", "type": "invalid_api_key"}}, {}
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        entries = [
            {"trajectory_id": label, "explanation": f"{block.count('good')} good", "score": rule_score(block)}
            for label, block in BLOCK.findall(user)
        ]
        entries.reverse()
        if fault == "missing_id":
            entries = entries[1:]
        elif fault == "extra_id":
            entries.append({"trajectory_id": "t99", "explanation": "?", "score": 0.5})
        elif fault == "out_of_range":
            entries[0]["score"] = 7.5
        content = json.dumps({"scores": entries})
        if fault == "invalid_json":
            content = "I think the first one is best, score 0.9!"
        elif fault == "prose" or (fmt is None and self.supports_schema is False):
            content = f"Here are my scores:\n```json\n{content}\n```\nHope this helps."
        return 200, completion(body.get("model", "judge"), content, len(user) // 4, len(content) // 4), {}


def completion(model: str, content: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def make_app(judge: FakeJudge) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        status, payload, headers = judge.answer(body)
        with judge.lock:
            judge.in_flight += 1
            judge.max_in_flight = max(judge.max_in_flight, judge.in_flight)
        try:
            if judge.delay_s:
                await asyncio.sleep(judge.delay_s)
        finally:
            with judge.lock:
                judge.in_flight -= 1
        if status == 200:
            with judge.lock:
                judge.answered += 1  # counted when the response leaves, as the client sees it
        return JSONResponse(payload, status_code=status, headers=headers)

    async def chat_with_timeout(request: Request) -> JSONResponse:
        # A queued timeout: hold the request past the client's timeout, then fail it.
        peek = judge.always or (judge.faults[0] if judge.faults else None)
        if peek == "timeout":
            with judge.lock:
                if not judge.always:
                    judge.faults.popleft()
                judge.requests.append(await request.json())
            await asyncio.sleep(judge.timeout_sleep_s)
            return JSONResponse({"error": {"message": "too late"}}, status_code=500)
        return await chat(request)

    return Starlette(routes=[Route("/v1/chat/completions", chat_with_timeout, methods=["POST"])])


class JudgeServer:
    """Runs a `FakeJudge` on 127.0.0.1 in a background thread (uvicorn)."""

    def __init__(self, judge: FakeJudge | None = None) -> None:
        self.judge = judge or FakeJudge()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            make_app(self.judge), log_level="warning", lifespan="off", backlog=2048, timeout_keep_alive=30
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("stand-in judge did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
