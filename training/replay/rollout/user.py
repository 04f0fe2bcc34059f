"""User rollout functions: the user's own agent, driven through an OpenAI-compatible client.

A rollout function is named by import path (`package.module:rollout`) and called once per
trajectory as `rollout(client, scenario)`: `client` is an `openai.AsyncOpenAI` (for `async
def` rollouts, served in process through `httpx.ASGITransport`) or an `openai.OpenAI` (for
plain functions, served on a loopback port), bound to the sampler; `scenario` is the
`Scenario` (`scenario.openai_messages()`, `scenario.tools`). It returns the final answer
(text, or anything JSON-serialisable) or None to use the last assistant message.

Every model call the agent makes is recorded token-exactly (prompt ids, sampled ids,
logprobs, finish reason) into the trajectory's `turns`, so agents written with the OpenAI
SDK or LangGraph produce trainable groups without changes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from training.replay.rollout.episodes import Recorder
from training.replay.rollout.loop import Episode, RolloutLimits, turn_record
from training.replay.rollout.openai_app import EPISODE_HEADER, LoopbackServer, create_app
from training.replay.rollout.tools import import_object
from training.replay.samplers.base import Sampler, SamplingParams
from training.replay.scenarios import Scenario


class UserRollouts:
    """Runs a user rollout function `group_size` times per scenario and records its model calls."""

    def __init__(
        self,
        sampler: Sampler,
        rollout: str | Callable[..., Any],
        *,
        params: SamplingParams | None = None,
        limits: RolloutLimits | None = None,
    ) -> None:
        self.spec = rollout if isinstance(rollout, str) else f"{rollout.__module__}:{rollout.__qualname__}"
        self.fn = import_object(rollout) if isinstance(rollout, str) else rollout
        self.limits = limits or RolloutLimits()
        self.recorder = Recorder(limit=self.limits.max_turns)
        self.app = create_app(
            sampler,
            default_params=params,
            recorder=self.recorder,
            max_total_tokens=self.limits.max_total_tokens,
        )
        self._server: LoopbackServer | None = None
        self._server_url: str | None = None
        self._server_lock = threading.Lock()  # sync rollouts start in several threads at once

    def describe(self) -> str:
        return self.spec

    async def run_group(self, scenario: Scenario, group_size: int) -> list[Episode]:
        return list(await asyncio.gather(*(self._one(scenario, k) for k in range(group_size))))

    async def _one(self, scenario: Scenario, rollout: int) -> Episode:
        episode_id = uuid.uuid4().hex
        self.recorder.start(episode_id, scenario.scenario_id, rollout)
        started = datetime.now(UTC)
        error: str | None = None
        value: Any = None
        try:
            if inspect.iscoroutinefunction(self.fn):
                async with httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=self.app), base_url="http://rollout"
                ) as http:
                    value = await self.fn(self._async_client(http, episode_id), scenario)
            else:
                value = await asyncio.to_thread(self.fn, self._sync_client(episode_id), scenario)
        except Exception as exc:  # the agent's failure is recorded in its trajectory, the group goes on
            error = f"{type(exc).__name__}: {exc}"
        return self._episode(scenario, self.recorder.pop(episode_id), value, error, started)

    def _async_client(self, http: httpx.AsyncClient, episode_id: str) -> Any:
        import openai

        return openai.AsyncOpenAI(
            base_url="http://rollout/v1",
            api_key="trajlake",
            http_client=http,  # type: ignore[arg-type]  # some openai builds annotate a vendored httpx
            default_headers={EPISODE_HEADER: episode_id},
            max_retries=0,
        )

    def _sync_client(self, episode_id: str) -> Any:
        import openai

        with self._server_lock:
            if self._server_url is None:
                self._server = LoopbackServer(self.app)
                self._server_url = self._server.start()
        return openai.OpenAI(
            base_url=f"{self._server_url}/v1",
            api_key="trajlake",
            default_headers={EPISODE_HEADER: episode_id},
            max_retries=0,
        )

    def _episode(
        self, scenario: Scenario, calls: list, value: Any, error: str | None, started: datetime
    ) -> Episode:
        episode = Episode(messages=list(scenario.messages), started_at=started, ended_at=datetime.now(UTC))
        if calls:
            episode.messages = list(calls[-1].messages)
            episode.turns = [turn_record(c.prompt_ids, c.completion) for c in calls]
        if value is not None:
            episode.final_output = value if isinstance(value, str) else json.dumps(value, default=str)
        elif calls:
            episode.final_output = calls[-1].messages[-1].get("content")
        if not all(c.extends_previous for c in calls):
            # The agent edited its history between calls: still token-exact per turn, but flagged.
            episode.finish_reason = "history_rewritten"
        if error is not None:
            limit_hit = "max_turns" in error
            episode.status = "truncated" if limit_hit else "error"
            episode.finish_reason = "max_turns" if limit_hit else "error"
            episode.error = error
        elif not calls:
            episode.status, episode.finish_reason, episode.error = (
                "error",
                "error",
                "the rollout made no model calls",
            )
        elif calls[-1].completion.finish_reason == "length":
            episode.status, episode.finish_reason = "truncated", "length"
        return episode

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self._server_url = None
