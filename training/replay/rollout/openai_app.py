"""An OpenAI-compatible ASGI app in front of any sampler, speaking vLLM's token-id extensions.

Routes: `POST /v1/chat/completions` (messages, tools, `n`, `logprobs`, returns `token_ids`
per choice and `prompt_token_ids`, tool calls parsed from Hermes `<tool_call>` blocks),
`POST /v1/completions` (prompt as text or token ids, `n`, `logprobs`, `return_token_ids`),
`POST /v1/load_lora_adapter` / `/v1/unload_lora_adapter`, `GET /v1/models`, `GET /health`.

Two uses:
- user rollout functions get an `openai` client bound to this app (in process through
  `httpx.ASGITransport`, or a loopback server), so agents written for the OpenAI SDK run
  unchanged while every model call is recorded token-exactly per episode (header
  `x-trajlake-episode`). A call whose rendered prompt extends the previous call's prompt +
  completion reuses those ids and tokenises only the new tail, so multi-turn prompts extend
  each other exactly as in the built-in loop;
- the tests' stand-in for `vllm serve`: the `vllm-server` backend talks to it over real HTTP.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from store.messages import from_openai
from training.chat.render import ChatRenderer, parse_tools
from training.replay.errors import SamplerError
from training.replay.rollout.episodes import RecordedCall, Recorder
from training.replay.rollout.loopback import LoopbackServer
from training.replay.rollout.model_bounds import (
    ModelBounds,
    context_problem,
    sample_while_connected,
    token_ids_problem,
    unhonoured_problem,
)
from training.replay.rollout.parsing import parse_assistant_text
from training.replay.rollout.request_checks import adapter_body_problem, messages_problem, prompt_problem
from training.replay.samplers.base import Sampler, SampleRequest, SamplingParams

__all__ = ["EPISODE_HEADER", "LoopbackServer", "create_app"]

EPISODE_HEADER = "x-trajlake-episode"
_GONE = "the client closed the request; its sampling was stopped"


def _given(body: dict[str, Any], key: str, default: Any) -> Any:
    """`body[key]` unless absent or null (a client's explicit null means the default)."""
    value = body.get(key)
    return default if value is None else value


def _error(status: int, message: str, kind: str = "BadRequestError") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def create_app(
    sampler: Sampler,
    *,
    default_params: SamplingParams | None = None,
    recorder: Recorder | None = None,
    max_total_tokens: int | None = None,
    adapters: Mapping[str, str] | None = None,
    served_name: str | None = None,
    bounds: ModelBounds | None = None,
) -> Starlette:
    """The app; `recorder` (optional) receives every chat call that carries an episode header.

    `adapters` preloads LoRA adapters by served name (`{"agent-v3": "/registry/agent/v3"}`);
    a request naming one samples through it and its response reports that name, as vLLM
    does for a LoRA. Other requests sample through the sampler's default and report
    `served_name` (what really answered: the default adapter's served name), else the
    requested model, so traces of this server are attributed to the right policy.

    `bounds` (what the model reads: `model_bounds`) refuse a prompt and completion longer
    than the model's context and token ids outside its vocabulary (400, before sampling);
    without them a request is held only to `max_total_tokens`. A request whose client
    leaves before its answer is cancelled (queued, it never runs; running, it stops).
    """
    defaults = default_params or SamplingParams()
    renderer = ChatRenderer(sampler.tokenizer)
    loaded: dict[str, str] = dict(adapters or {})  # served name -> adapter path

    def reported_model(body: dict[str, Any]) -> str:
        requested = str(body.get("model") or "")
        if requested in loaded:
            return requested
        return served_name or requested or sampler.model

    def params_from(body: dict[str, Any], prompt_len: int) -> SamplingParams:
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        asked = max_tokens is not None
        if max_tokens is None:
            max_tokens = defaults.max_tokens
        context = bounds.context_tokens if bounds is not None else None
        if context is not None:
            if not asked:  # the default budget fits the room the prompt leaves, as vLLM's does
                max_tokens = max(1, min(max_tokens, context - prompt_len))
            if problem := context_problem(prompt_len, max_tokens, context):
                raise SamplerError(problem, backend="openai-app", reason="context_exceeded")
        if max_total_tokens is not None:
            max_tokens = min(max_tokens, max_total_tokens - prompt_len)
        if max_tokens < 1 and max_total_tokens is None:
            raise SamplerError(
                f"`max_tokens` must be >= 1, got {max_tokens}", backend="openai-app", reason="bad_params"
            )
        if max_tokens < 1:
            raise SamplerError(
                f"the prompt has {prompt_len} tokens, leaving no room under the context budget of {max_total_tokens}",
                backend="openai-app",
                reason="context_exhausted",
            )
        return SamplingParams(
            max_tokens=int(max_tokens),
            temperature=float(_given(body, "temperature", defaults.temperature)),
            top_p=float(_given(body, "top_p", defaults.top_p)),
            top_k=max(0, int(body.get("top_k") or defaults.top_k)),  # vLLM's -1: off
            seed=body.get("seed", defaults.seed),
            stop_token_ids=tuple(body.get("stop_token_ids") or defaults.stop_token_ids),
        )

    def greedy_group_refused(n: int, params: SamplingParams) -> JSONResponse | None:
        # vLLM's answer, kept so that a client of this stand-in works against vLLM too.
        if n > 1 and params.temperature == 0:
            return _error(400, f"n must be 1 when using greedy sampling, got {n}")
        return None

    def adapter_for(body: dict[str, Any]) -> str | None:
        return loaded.get(body.get("model") or "")

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "`messages` must be a non-empty list")
        if problem := messages_problem(messages) or unhonoured_problem(body, completions=False):
            return _error(400, problem)
        episode = request.headers.get(EPISODE_HEADER)
        if (
            episode
            and recorder is not None
            and recorder.limit is not None
            and recorder.count(episode) >= recorder.limit
        ):
            return _error(
                400, f"episode `{episode}` reached its limit of {recorder.limit} model calls (max_turns)"
            )
        lake_messages = [from_openai(m) for m in messages]
        tools = parse_tools(body.get("tools"))
        tools = (
            [t if "function" in t else {"type": "function", "function": t} for t in tools] if tools else None
        )
        prompt_text = renderer.render(lake_messages, tools, add_generation_prompt=True)
        previous = recorder.previous(episode) if (episode and recorder is not None) else None
        extends = False
        if previous is not None and prompt_text.startswith(previous.full_text):
            extends = True
            tail = prompt_text[len(previous.full_text) :]
            prompt_ids = previous.prompt_ids + list(previous.completion.token_ids) + renderer.encode(tail)
        else:
            prompt_ids = renderer.encode(prompt_text)
        n = int(body.get("n") or 1)
        try:
            params = params_from(body, len(prompt_ids))
            if episode and recorder is not None:
                # A recorded episode samples from the replay's distribution, whatever the agent asks
                # for: GRPO divides by the temperature the replay records with the group.
                params = dataclasses.replace(
                    params, temperature=defaults.temperature, top_p=defaults.top_p, top_k=defaults.top_k
                )
            if episode and recorder is not None and body.get("seed") is None:
                # The default seed, per episode and call (see `turn_seed`): else every episode of a group
                # that reaches the same prompt would sample the same answer.
                params = params.with_seed(recorder.call_seed(episode, params.seed))
            if refused := greedy_group_refused(n, params):
                return refused
            completions = await sample_while_connected(
                sampler,
                SampleRequest(tuple(prompt_ids), n, params, adapter_for(body)),
                request.is_disconnected,
            )
        except SamplerError as exc:
            return _error(400, str(exc))
        if completions is None:
            return _error(499, _GONE)
        choices = []
        for i, completion in enumerate(completions):
            ids = list(completion.token_ids)
            stopped = completion.finish_reason == "stop" and ids and ids[-1] == renderer.eos_token_id
            text = renderer.decode(ids[:-1] if stopped else ids)
            parsed = parse_assistant_text(text)
            ok_calls = [c for c in parsed.tool_calls if c.ok] if completion.finish_reason == "stop" else []
            tool_calls = [
                {
                    "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in ok_calls
            ]
            content = parsed.content if tool_calls else text
            finish = "tool_calls" if tool_calls else completion.finish_reason
            choice: dict[str, Any] = {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": content or None,
                    "tool_calls": tool_calls or None,
                },
                "finish_reason": finish,
                "logprobs": None,
                "token_ids": ids,
            }
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": renderer.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(ids, completion.logprobs, strict=True)
                    ]
                }
            choices.append(choice)
            if i == 0 and episode and recorder is not None:
                assistant = from_openai(choice["message"])
                recorder.add(
                    episode,
                    RecordedCall(
                        prompt_ids=prompt_ids,
                        completion=completion,
                        messages=[*lake_messages, assistant],
                        extends_previous=extends or previous is None,
                        full_text=prompt_text + renderer.decode(ids),
                    ),
                )
        completion_tokens = sum(len(c.token_ids) for c in completions)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": reported_model(body),
                "choices": choices,
                "prompt_token_ids": prompt_ids,
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": completion_tokens,
                    "total_tokens": len(prompt_ids) + completion_tokens,
                },
            }
        )

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        prompt = body.get("prompt")
        if prompt is None or (problem := prompt_problem(prompt)):
            return _error(400, "`prompt` must be text, a list of token ids, or a list of those")
        prompts = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else list(prompt)
        if body.get("echo"):
            return _error(400, "`echo` is not supported")
        if problem := unhonoured_problem(body, completions=True):
            return _error(400, problem)
        id_prompts = [renderer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        vocab = bounds.vocab_size if bounds is not None and bounds.vocab_size else len(renderer.tokenizer)
        for ids in id_prompts:
            if problem := token_ids_problem(ids, vocab):
                return _error(400, problem)
        n = int(body.get("n") or 1)
        try:
            if refused := greedy_group_refused(n, params_from(body, 1)):
                return refused
            asked = [
                SampleRequest(tuple(ids), n, params_from(body, len(ids)), adapter_for(body))
                for ids in id_prompts
            ]
            results = []
            for sample in asked:  # every prompt is checked (context) before any is sampled
                answer = await sample_while_connected(sampler, sample, request.is_disconnected)
                if answer is None:
                    return _error(499, _GONE)
                results.append(answer)
        except SamplerError as exc:
            return _error(400, str(exc))
        skip_special = body.get("skip_special_tokens", True)
        choices = []
        for p, (ids, completions_) in enumerate(zip(id_prompts, results, strict=True)):
            for j, c in enumerate(completions_):
                tokens = [renderer.decode([t]) for t in c.token_ids]
                choice: dict[str, Any] = {
                    "index": p * n + j,
                    "text": renderer.tokenizer.decode(list(c.token_ids), skip_special_tokens=skip_special),
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                    "stop_reason": None,
                }
                if body.get("logprobs") is not None:
                    offsets, at = [], 0
                    for token in tokens:
                        offsets.append(at)
                        at += len(token)
                    choice["logprobs"] = {
                        "text_offset": offsets,
                        "token_logprobs": list(c.logprobs),
                        "tokens": tokens,
                        "top_logprobs": None,
                    }
                if body.get("return_token_ids"):
                    choice["token_ids"] = list(c.token_ids)
                    choice["prompt_token_ids"] = ids
                choices.append(choice)
        prompt_tokens = sum(len(ids) for ids in id_prompts)
        completion_tokens = sum(len(c.token_ids) for cs in results for c in cs)
        return JSONResponse(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": reported_model(body),
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

    async def load_adapter(request: Request) -> PlainTextResponse | JSONResponse:
        body = await request.json()
        if problem := adapter_body_problem(body, load=True):
            return _error(400, problem)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _error(400, "both `lora_name` and `lora_path` must be provided")
        if name in loaded:
            return _error(400, f"The lora adapter '{name}' has already been loaded.")
        from pathlib import Path

        if not (Path(path) / "adapter_config.json").exists():
            return _error(404, f"no LoRA adapter at `{path}` (adapter_config.json missing)", "NotFoundError")
        loaded[name] = path
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_adapter(request: Request) -> PlainTextResponse | JSONResponse:
        body = await request.json()
        if problem := adapter_body_problem(body, load=False):
            return _error(400, problem)
        name = body.get("lora_name")
        if name not in loaded:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        del loaded[name]
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    async def models(request: Request) -> JSONResponse:
        data = [{"id": sampler.model, "object": "model", "owned_by": "trajlake"}]
        data += [
            {"id": name, "object": "model", "parent": sampler.model, "root": path}
            for name, path in loaded.items()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/load_lora_adapter", load_adapter, methods=["POST"]),
            Route("/v1/unload_lora_adapter", unload_adapter, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
