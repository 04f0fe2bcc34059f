"""Row builders for the training tests (trajectories, rewards, scenarios written into a test lake)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import store


def msg(role: str, content: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "name": kw.get("name"),
        "tool_call_id": kw.get("tool_call_id"),
        "tool_calls": kw.get("tool_calls") or [],
        "is_error": kw.get("is_error"),
    }


def turn(
    prompt: list[int], completion: list[int], logprobs: list[float] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "logprobs": logprobs if logprobs is not None else [-1.0] * len(completion),
        "finish_reason": finish,
    }


def traj(
    tid: str,
    *,
    group_id: str | None = None,
    scenario_id: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    turns: list[dict[str, Any]] | None = None,
    tools: str | None = None,
    source: str = "replay",
    offset_s: int = 0,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    started = store.utc_now() - timedelta(seconds=offset_s)
    return {
        "trajectory_id": tid,
        "source": source,
        "started_at": started,
        "ended_at": started,
        "messages": messages
        or [msg("user", f"What is 2 + {len(tid)}?"), msg("assistant", f"The answer is {2 + len(tid)}.")],
        "tools": tools,
        "scenario_id": scenario_id,
        "group_id": group_id,
        "turns": turns or [],
        "metadata": json.dumps(metadata) if metadata is not None else None,
    }


def reward(
    tid: str,
    value: float | None,
    *,
    name: str = "correct",
    group_id: str | None = None,
    scorer: str = "tests.reward@1",
    status: str = "ok",
) -> dict[str, Any]:
    return {
        "trajectory_id": tid,
        "name": name,
        "scorer": scorer,
        "value": value,
        "group_id": group_id,
        "scored_at": store.utc_now(),
        "status": status,
    }


def model_logprobs(
    model_path: str, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """Logprob of each completion token under the base model at `temperature` (what a sampler would store)."""
    import torch

    model = _cached_model(model_path)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    logps = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1)
    return logps.tolist()


_MODELS: dict[str, object] = {}


def _cached_model(model_path: str):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    if model_path not in _MODELS:
        _MODELS[model_path] = AutoModelForCausalLM.from_pretrained(model_path).eval()
    return _MODELS[model_path]


def stored_groups(
    model_path: str,
    *,
    groups: int = 3,
    size: int = 4,
    seed: int = 0,
    temperature: float = 1.0,
    multi_turn: bool = True,
    vocab: int = 500,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Scored groups with token data whose logprobs are the base model's own (an on-policy sample).

    Multi-turn rows have a tool-result glue between the two sampled turns.
    """
    import random

    rng = random.Random(seed)
    rows, rewards = [], []
    for g in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(6 + g)]
        for k in range(size):
            tid = f"g{g}-{k}"
            first = [rng.randrange(3, vocab) for _ in range(3 + k)]
            turns = [
                turn(prompt, first, model_logprobs(model_path, prompt, first, temperature), "tool_calls")
            ]
            if multi_turn:
                history = prompt + first + [rng.randrange(3, vocab) for _ in range(4)]
                second = [rng.randrange(3, vocab) for _ in range(2 + (k % 2))]
                turns.append(turn(history, second, model_logprobs(model_path, history, second, temperature)))
            # recorded as a replay records it: GRPO divides by the temperature the groups were sampled at
            sampling = {"sampling": {"temperature": temperature}}
            rows.append(traj(tid, group_id=f"g{g}", scenario_id=f"s{g}", turns=turns, metadata=sampling))
            rewards.append(reward(tid, float((k + g) % 3) / 2, group_id=f"g{g}"))
    return rows, rewards
