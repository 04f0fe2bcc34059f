"""A scripted OpenAI-compatible LLM server on loopback, for recording real agent frameworks.

It speaks the real wire protocol of

- `POST /v1/chat/completions`, JSON (`stream: false`) or SSE (`stream: true`, with
  `stream_options.include_usage` honoured: the usage arrives in a last chunk with no choices);
- `POST /v1/responses` (the Responses API), JSON or SSE events (`response.created` ...
  `response.completed`);
- `GET /v1/models` (some clients probe it).

The script is the two-turn weather agent: while no tool result is in the input, the model
calls `get_weather` with `{"city": "Paris"}`; once one is (a `tool` message, or a
`function_call_output` item), it answers `FINAL_ANSWER`. Token usage is fixed per turn
(`USAGE`), so a trajectory's sums are known in advance: 110 in, 21 out.

Failing mode (`ScriptedLLM(fail="second")`): the second call (the one after the tool
result) is answered 500 with an OpenAI-shaped error body, on every retry.

Every request the server receives is kept in `exchanges` (path, body, turn, status), so a
recording can show what the model actually saw.

The script's content (model, tool call, answer, usage) is in `weather_script.py`, the Responses
API in `scripted_responses.py`; `tests.ingest.fake_openai.serve_in_thread` serves it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.ingest.frameworks.scripted_responses import ResponsesAPI
from tests.ingest.frameworks.weather_script import (
    ERROR_MESSAGE,
    FINAL_ANSWER,
    FINAL_CALL_ID,
    FINAL_TOOL,
    MODEL,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_NAME,
    USAGE,
    _chunks,
    _has_tool_result_chat,
    _offers_final_tool,
)


class ScriptedLLM(ResponsesAPI):
    """The app plus its record of exchanges; `fail="second"` makes the answer turn fail with 500."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.exchanges: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/responses", self.responses, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/models", self.models, methods=["GET"]),
            ]
        )

    # --- bookkeeping

    def _record(self, path: str, body: dict[str, Any], turn: int, status: int) -> int:
        with self._lock:
            self.exchanges.append({"path": path, "turn": turn, "status": status, "request": body})
            return len(self.exchanges)

    def _fails(self, turn: int) -> bool:
        return self.fail == "second" and turn == 2

    def _error(self) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": ERROR_MESSAGE, "type": "server_error", "param": None, "code": "scripted"}},
            status_code=500,
        )

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "scripted"}],
            }
        )

    # --- chat completions

    async def chat_completions(self, request: Request) -> Response:
        body = await request.json()
        turn = 2 if _has_tool_result_chat(body) or not body.get("tools") else 1
        fails = self._fails(turn)
        number = self._record(request.url.path, body, turn, 500 if fails else 200)
        if fails:
            return self._error()
        prompt, completion = USAGE[turn - 1]
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        completion_id = f"chatcmpl-scripted-{number}"
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                self._chat_stream(
                    completion_id, created, turn, usage, include_usage, _offers_final_tool(body)
                ),
                media_type="text/event-stream",
            )
        if turn == 1:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": TOOL_CALL_ID,
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": TOOL_ARGUMENTS},
                    }
                ],
            }
            finish = "tool_calls"
        elif _offers_final_tool(body):
            message = {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": FINAL_CALL_ID,
                        "type": "function",
                        "function": {"name": FINAL_TOOL, "arguments": json.dumps({"answer": FINAL_ANSWER})},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": FINAL_ANSWER, "refusal": None}
            finish = "stop"
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": MODEL,
                "system_fingerprint": "fp_scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
            }
        )

    async def _chat_stream(
        self,
        completion_id: str,
        created: int,
        turn: int,
        usage: dict[str, Any],
        include_usage: bool,
        final_tool: bool = False,
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL,
                "system_fingerprint": "fp_scripted",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
            if include_usage:
                payload["usage"] = None
            return f"data: {json.dumps(payload)}\n\n".encode()

        if turn == 1 or final_tool:
            call_id, name, arguments = (
                (TOOL_CALL_ID, TOOL_NAME, TOOL_ARGUMENTS)
                if turn == 1
                else (FINAL_CALL_ID, FINAL_TOOL, json.dumps({"answer": FINAL_ANSWER}))
            )
            yield chunk({"role": "assistant", "content": None, "refusal": None})
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _chunks(arguments, 6):
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            yield chunk({}, "tool_calls")
        else:
            yield chunk({"role": "assistant", "content": "", "refusal": None})
            for piece in _chunks(FINAL_ANSWER, 8):
                yield chunk({"content": piece})
            yield chunk({}, "stop")
        if include_usage:
            last = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": MODEL,
                "system_fingerprint": "fp_scripted",
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(last)}\n\n".encode()
        yield b"data: [DONE]\n\n"


if __name__ == "__main__":  # a manual server: python -m tests.ingest.frameworks.scripted_llm [PORT] [second]
    import sys

    scripted = ScriptedLLM(fail=sys.argv[2] if len(sys.argv) > 2 else None)
    uvicorn.run(scripted.app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
