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
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "gpt-4o-mini-2024-07-18"
QUESTION = "What is the weather in Paris?"
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Get the current weather for a city."
TOOL_CALL_ID = "call_weather_paris_1"  # the id the model gives its tool call (chat and Responses)
TOOL_ITEM_ID = "fc_weather_paris_1"  # the Responses API output item id of that call
TOOL_ARGUMENTS = '{"city": "Paris"}'
TOOL_RESULT = "18C and sunny in Paris"
FINAL_ANSWER = "It is 18C and sunny in Paris."
SYSTEM_PROMPT = "You are a weather assistant. Use the get_weather tool to answer."
USAGE = [(40, 12), (70, 9)]  # (input, output) tokens of turn 1 (tool call) and turn 2 (answer)
INPUT_TOKENS = sum(u[0] for u in USAGE)
OUTPUT_TOKENS = sum(u[1] for u in USAGE)
TOOL_ERROR_TEXT = (
    "weather service unavailable"  # what the tool raises in a failing run (agents/corpus_common.py)
)
ERROR_MESSAGE = "The scripted model failed on purpose (failing run)."
# Frameworks that end a run only through a `final_answer` tool (smolagents) get the answer as
# that tool's call on turn 2, when they offer it.
FINAL_TOOL = "final_answer"
FINAL_CALL_ID = "call_final_answer_1"


def _offers_final_tool(body: dict[str, Any]) -> bool:
    for tool in body.get("tools") or []:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if name == FINAL_TOOL:
            return True
    return False


def _has_tool_result_chat(body: dict[str, Any]) -> bool:
    # Frameworks that send the tool result back as plain text (smolagents: a user message
    # "Observation: ...") are recognised by the result text itself.
    if TOOL_RESULT in json.dumps(body.get("messages") or []):
        return True
    for message in body.get("messages") or []:
        if message.get("role") in ("tool", "function"):
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") in ("tool_result", "function_call_output") for p in content
        ):
            return True
    return False


def _has_tool_result_responses(body: dict[str, Any]) -> bool:
    if TOOL_RESULT in json.dumps(body.get("input") or []):
        return True
    items = body.get("input")
    if not isinstance(items, list):
        return False
    return any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class ScriptedLLM:
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

    # --- Responses API

    async def responses(self, request: Request) -> Response:
        body = await request.json()
        turn = 2 if _has_tool_result_responses(body) or not body.get("tools") else 1
        fails = self._fails(turn)
        number = self._record(request.url.path, body, turn, 500 if fails else 200)
        if fails:
            return self._error()
        prompt, completion = USAGE[turn - 1]
        response_id = f"resp_scripted_{number}"
        if turn == 1:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": TOOL_ITEM_ID,
                "call_id": TOOL_CALL_ID,
                "name": TOOL_NAME,
                "arguments": TOOL_ARGUMENTS,
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_scripted_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": FINAL_ANSWER, "annotations": [], "logprobs": []}],
            }
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        completed = self._response_object(body, response_id, "completed", [item], usage)
        if body.get("stream"):
            return StreamingResponse(
                self._responses_stream(body, response_id, item, completed), media_type="text/event-stream"
            )
        return JSONResponse(completed)

    def _response_object(
        self,
        body: dict[str, Any],
        response_id: str,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": MODEL,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": 0,
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    async def _responses_stream(
        self, body: dict[str, Any], response_id: str, item: dict[str, Any], completed: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        sequence = 0

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **fields}
            sequence += 1
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

        started = self._response_object(body, response_id, "in_progress", [], None)
        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        if item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=0,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _chunks(TOOL_ARGUMENTS, 6):
                yield event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=piece
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                name=item["name"],
                arguments=TOOL_ARGUMENTS,
            )
        else:
            yield event(
                "response.output_item.added",
                output_index=0,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event(
                "response.content_part.added", item_id=item["id"], output_index=0, content_index=0, part=part
            )
            for piece in _chunks(FINAL_ANSWER, 8):
                yield event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            yield event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                text=FINAL_ANSWER,
                logprobs=[],
            )
            yield event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                part={**part, "text": FINAL_ANSWER},
            )
        yield event("response.output_item.done", output_index=0, item=item)
        yield event("response.completed", response=completed)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_in_thread(app: Any, port: int | None = None) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port; yields its base URL (no trailing slash)."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False
        )
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


if __name__ == "__main__":  # a manual server: python -m tests.ingest.frameworks.scripted_llm [PORT] [second]
    import sys

    scripted = ScriptedLLM(fail=sys.argv[2] if len(sys.argv) > 2 else None)
    uvicorn.run(scripted.app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
