"""Row builders for the training tests (trajectories, rewards, scenarios written into a test lake)."""

from __future__ import annotations

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
