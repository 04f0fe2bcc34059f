"""The Responses API half of the scripted model (`POST /v1/responses`, JSON or SSE events from
`response.created` to `response.completed`), a mixin of `scripted_llm.ScriptedLLM`, whose
bookkeeping (`_record`, `_fails`, `_error`) it uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.ingest.frameworks.weather_script import (
    FINAL_ANSWER,
    MODEL,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_ITEM_ID,
    TOOL_NAME,
    USAGE,
    _chunks,
    _has_tool_result_responses,
)


class ResponsesAPI:
    """`responses`, the route `ScriptedLLM` serves at `/v1/responses` and `/responses`."""

    if TYPE_CHECKING:  # ScriptedLLM's bookkeeping (scripted_llm.py)

        def _record(self, path: str, body: dict[str, Any], turn: int, status: int) -> int: ...

        def _fails(self, turn: int) -> bool: ...

        def _error(self) -> JSONResponse: ...

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
