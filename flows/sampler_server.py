"""What `trajlake serve-sampler` serves: a model behind the OpenAI-compatible app, on CPU or GPU,
optionally through a LoRA adapter that answers under its served name.

The adapter is a folder or a registry reference (`calculator-agent:production`,
`name:3`). A published version is served as `<name>-v<version>`
(`store.served_adapter_name`), the name `trajlake publish --load-into` gives vLLM, so an
agent pointed at this server records that name as its model on every trace, and the
lake's `policy_performance` view attributes its production feedback to that version.
The demo runs this very app for its second production batch.

Every completion request passes `RequestLimits` first (`n`, `max_tokens`, prompt size, body
size: 400 past one) and must name a model the server serves (404 otherwise, as vLLM does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import store

if TYPE_CHECKING:
    from training.replay.samplers import SamplingParams


def served_adapter(
    adapter: str | None, *, lake: store.Lake | str | None = None, served_name: str | None = None
) -> tuple[str | None, str | None]:
    """(adapter folder, served name) of a folder or a registry reference; (None, None) without one.

    A folder that is a published version (its `manifest.json` names it) is served under
    its version's name; any other folder under `served_name`, else a name derived from
    its path.
    """
    if adapter is None:
        return None, served_name
    folder = Path(adapter)
    if (folder / "adapter_config.json").exists():
        manifest = folder / "manifest.json"
        if served_name is None and manifest.exists():
            published = json.loads(manifest.read_text())
            served_name = store.served_adapter_name(published["name"], int(published["version"]))
        if served_name is None:
            from training.replay.samplers import adapter_name

            served_name = adapter_name(str(folder))
        return str(folder), served_name
    if lake is None:
        raise FileNotFoundError(
            f"`{adapter}` is not an adapter folder (no adapter_config.json); to serve a published "
            "version by reference (`name:alias`), pass the lake it was published to (--lake)"
        )
    from training.registry import resolve_adapter

    row = resolve_adapter(lake, adapter)
    return str(row["path"]), served_name or store.served_adapter_name(row["name"], int(row["version"]))


def sampler_app(
    model: str,
    adapter: str | None = None,
    *,
    lake: store.Lake | str | None = None,
    served_name: str | None = None,
    defaults: SamplingParams | None = None,
    limits: RequestLimits | None = None,
) -> tuple[Any, Any, str]:
    """(ASGI app, its sampler, the served model name): the transformers sampler on `model`,
    through `adapter` when given; `defaults` are the parameters of requests that set none;
    `limits` bound what a request may ask (`RequestLimits`' defaults when None), and a
    request naming a model other than the base model or the served adapter is answered 404.
    Close the sampler when done (`with sampler:`)."""
    from training.replay.rollout.openai_app import create_app
    from training.replay.samplers import make_sampler
    from training.serving import check_adapter_files

    path, name = served_adapter(adapter, lake=lake, served_name=served_name)
    if path is not None:
        check_adapter_files(path)  # a truncated file is refused now, not on the first request
    sampler = make_sampler("transformers", model, adapter=path)
    app = create_app(
        sampler,
        default_params=defaults,
        adapters={name: path} if path and name else None,
        served_name=name if path else None,
    )
    models = {sampler.model, *([name] if path and name else [])}
    return guarded(app, limits or RequestLimits(), models), sampler, name or sampler.model


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

    def __post_init__(self) -> None:
        for name in ("max_n", "max_tokens", "max_prompt_chars", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")


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


def request_problem(body: Any, limits: RequestLimits, models: set[str]) -> tuple[int, str] | None:
    """(status, message) refusing one completion request's body, or None when it may run."""
    if not isinstance(body, dict):
        return 400, f"the request body must be a JSON object, got {type(body).__name__}"
    model = body.get("model")
    if model not in (None, "") and str(model) not in models:
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
    return None


_COMPLETIONS = {"/v1/chat/completions", "/v1/completions"}
_ADAPTERS = {"/v1/load_lora_adapter": True, "/v1/unload_lora_adapter": False}


def guarded(app: Any, limits: RequestLimits, models: set[str]) -> Any:
    """The ASGI `app` behind `limits`: completion requests are read (up to `max_body_bytes`),
    checked with `request_problem`, and passed on with their body; adapters loaded or
    unloaded through the app add or remove their names from `models`."""

    async def reply(send: Any, status: int, message: str) -> None:
        kind = "NotFoundError" if status == 404 else "BadRequestError"
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
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body_bytes:
                await reply(
                    send, 400, f"the request body is over the limit of {limits.max_body_bytes:,} bytes"
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            await reply(send, 400, "the request body is not a JSON object")
            return
        if path in _COMPLETIONS and (problem := request_problem(body, limits, models)):
            await reply(send, *problem)
            return
        status: list[int] = []

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        await app(scope, replay, watch)
        name = body.get("lora_name") if isinstance(body, dict) else None
        if path in _ADAPTERS and status == [200] and isinstance(name, str):
            (models.add if _ADAPTERS[path] else models.discard)(name)

    return guard
