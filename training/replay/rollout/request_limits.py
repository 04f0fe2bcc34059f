"""What one request to an OpenAI-compatible server trajlake runs may ask for, checked before
the model sees it: `trajlake serve-sampler`'s app and the vLLM server trajlake starts
(`training.replay.samplers.vllm_launch`, through vLLM's `--middleware`).

A request past a limit (`n`, `max_tokens`, prompt characters, body bytes) is answered 400
before anything is generated, so no request can hold the server's memory or time for
longer than the limits allow (`n: 1000000` once grew `serve-sampler` to 8.8 GB). This
module imports nothing heavy: vLLM's process imports it at start.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from training.replay.rollout.request_checks import (
    adapter_body_problem,
    messages_problem,
    prompt_problem,
    sampling_problem,
)

# The limits a vLLM server started by trajlake applies (`VLLMRequestLimits`), as JSON.
LIMITS_VARIABLE = "TRAJLAKE_REQUEST_LIMITS"


@dataclass(frozen=True)
class RequestLimits:
    """What one request to `serve-sampler` may ask for. Past a limit the request is answered
    400 before the model sees it, so no request can hold the server's memory or time for
    longer than these allow; a model name the server does not serve is answered 404, as
    vLLM answers it (production traces must not name a policy that never served them)."""

    max_n: int = field(default=64, metadata={"help": "Most completions one request may ask for (`n`)."})
    max_tokens: int = field(
        default=8192, metadata={"help": "Most tokens one completion may ask for (`max_tokens`)."}
    )
    max_prompt_chars: int = field(
        default=1_000_000,
        metadata={
            "help": "Most characters of text in a request's messages or prompt (a token id counts one)."
        },
    )
    max_body_bytes: int = field(
        default=8 * 1024 * 1024, metadata={"help": "Largest request body read, in bytes."}
    )
    read_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Seconds a client may take to send a request's headers, and again its body "
            "(408 past them), so a slow client cannot hold a connection."
        },
    )

    def __post_init__(self) -> None:
        for name in ("max_n", "max_tokens", "max_prompt_chars", "max_body_bytes", "read_timeout_s"):
            value = getattr(self, name)
            if not value >= 1:  # NaN too
                raise ValueError(f"`{name}` must be >= 1, got {value}")


def _text_size(value: Any) -> int:
    """Characters of text (and token ids) in a prompt or message list, iteratively."""
    size, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, (int, float)):
            size += 1
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return size


def request_problem(body: Any, limits: RequestLimits, models: set[str] | None) -> tuple[int, str] | None:
    """(status, message) refusing one completion request's body, or None when it may run."""
    if not isinstance(body, dict):
        return 400, f"the request body must be a JSON object, got {type(body).__name__}"
    model = body.get("model")
    if models is not None and model not in (None, "") and str(model) not in models:
        return 404, f"The model `{model}` does not exist (served: {', '.join(sorted(models))})."
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= limits.max_n):
        return 400, f"`n` must be an integer from 1 to {limits.max_n} (`max_n`), got {str(n)[:40]}"
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limits.max_tokens
        ):
            return 400, f"`{key}` must be an integer from 1 to {limits.max_tokens}, got {str(value)[:40]}"
    size = _text_size(body.get("messages")) + _text_size(body.get("prompt"))
    if size > limits.max_prompt_chars:
        return 400, f"the prompt holds {size:,} characters; the limit is {limits.max_prompt_chars:,}"
    problem = (
        prompt_problem(body.get("prompt"))
        or messages_problem(body.get("messages"))
        or sampling_problem(body, limits.max_tokens)
    )
    return (400, problem) if problem else None


def adapter_problem(body: Any) -> str | None:
    """Why an adapter asked to be hot-loaded cannot be (a truncated or corrupt file,
    `training.models.adapters.check_adapter_files`), or None: left to the server when the folder
    is not there at all (vLLM and the app answer that 404 themselves)."""
    from pathlib import Path

    from training.errors import AdapterNotServable
    from training.models.adapters import check_adapter_files

    path = body.get("lora_path") if isinstance(body, dict) else None
    if not isinstance(path, str) or not (Path(path) / "adapter_config.json").exists():
        return None
    try:
        check_adapter_files(path)
    except AdapterNotServable as exc:
        return str(exc)
    return None


_COMPLETIONS = {"/v1/chat/completions", "/v1/completions"}
_ADAPTERS = {"/v1/load_lora_adapter": True, "/v1/unload_lora_adapter": False}


def guarded(app: Any, limits: RequestLimits, models: set[str] | None) -> Any:
    """The ASGI `app` behind `limits`: completion requests are read (up to `max_body_bytes`),
    checked with `request_problem`, and passed on with their body; adapters loaded or
    unloaded through the app add or remove their names from `models`. With `models` None
    the app answers unknown model names itself (vLLM does: 404)."""

    async def read_body(receive: Any, chunks: list[bytes]) -> bool | None:
        """Reads the body into `chunks`: True past `max_body_bytes` (read no further), None
        when the client left, False when all of it is read."""
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body_bytes:
                return True
            chunks.append(chunk)
            more = message.get("more_body", False)
        return False

    async def reply(send: Any, status: int, message: str) -> None:
        kind = {404: "NotFoundError", 408: "RequestTimeoutError"}.get(status, "BadRequestError")
        payload = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def guard(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or (path not in _COMPLETIONS and path not in _ADAPTERS)
        ):
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(limits.read_timeout_s):
                too_big = await read_body(receive, chunks)
        except TimeoutError:
            # A client trickling its body held the connection (65 s seen) with no deadline.
            await reply(send, 408, f"the request body did not arrive within {limits.read_timeout_s:g}s")
            return
        if too_big is None:  # the client left
            return
        if too_big:
            await reply(send, 400, f"the request body is over the limit of {limits.max_body_bytes:,} bytes")
            return
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            await reply(send, 400, "the request body is not a JSON object")
            return
        if path in _COMPLETIONS and (problem := request_problem(body, limits, models)):
            await reply(send, *problem)
            return
        if path in _ADAPTERS and (refused := adapter_body_problem(body, _ADAPTERS[path])):
            await reply(send, 400, refused)
            return
        if path == "/v1/load_lora_adapter" and (refused := adapter_problem(body)):
            await reply(send, 400, refused)
            return
        status: list[int] = []

        replayed = False

        async def replay() -> dict[str, Any]:
            # The body once; after it, the client's own messages: vLLM waits on them for a
            # disconnect, and answering the body again would spin its event loop.
            nonlocal replayed
            if replayed:
                return await receive()  # type: ignore[no-any-return]
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await app(scope, replay, watch)
        name = body.get("lora_name") if isinstance(body, dict) else None
        if models is not None and path in _ADAPTERS and status == [200] and isinstance(name, str):
            (models.add if _ADAPTERS[path] else models.discard)(name)

    return guard


class VLLMRequestLimits:
    """`guarded` as the ASGI middleware class vLLM's `--middleware` takes: the limits come
    from `$TRAJLAKE_REQUEST_LIMITS` (JSON of `RequestLimits`, set by `vllm_launch`), model
    names are left to vLLM (it answers 404)."""

    def __init__(self, app: Any) -> None:
        raw = os.environ.get(LIMITS_VARIABLE)
        limits = RequestLimits(**json.loads(raw)) if raw else RequestLimits()
        self.app = guarded(app, limits, None)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def limits_environment(limits: RequestLimits) -> dict[str, str]:
    """The environment variable that hands `limits` to a vLLM server's `VLLMRequestLimits`."""
    return {LIMITS_VARIABLE: json.dumps(asdict(limits))}
