"""The token-level agent loop: multi-turn rollouts with tools, recorded token for token.

A group of `G` rollouts of one scenario starts with a single request for `G` samples of the
rendered prompt (vLLM shares that prefill across the samples). Each sample then goes on by
itself: its text is parsed for `<tool_call>` blocks, the tools answer, and the next prompt is

    previous prompt ids + sampled ids + ids of the rendered tool-result suffix

never a re-tokenised conversation; the loop checks that every prompt extends the last. A
rollout ends when the model answers without calling a tool (`ok`), when a completion hits
its token budget, the turn limit or the total-token limit (`truncated`, with the reason in
`finish_reason`), and a malformed tool call is answered with an error result, like any
failed tool, so the model can recover and the batch never crashes.

With a seed, each request gets its own (`turn_seed`): the first a seed per scenario (the
backends seed sample `j` with that seed + `j`), each later turn a seed per rollout and turn.
One seed for every request would draw the same noise for every rollout, and rollouts that
reach the same prompt (the same tool call, the same result) would answer alike, leaving the
group less diverse than it looks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from store.errors import check_settings
from store.messages import lake_message, lake_tool_call
from training.chat.render import ChatRenderer
from training.chat.templates import ChatTemplateError
from training.replay.errors import ReplaySetupError, RolloutError
from training.replay.rollout.parsing import ParsedToolCall, parse_assistant_text
from training.replay.rollout.tools import ToolResult, ToolSource
from training.replay.samplers.base import Completion, Sampler, SampleRequest, SamplingParams
from training.replay.scenarios import Scenario

EpisodeStatus = Literal["ok", "truncated", "error"]


@dataclass(frozen=True)
class RolloutLimits:
    """Bounds on one rollout (each turn's own token budget is `SamplingParams.max_tokens`)."""

    max_turns: int = field(default=8, metadata={"help": "Most assistant turns (model calls) per rollout."})
    max_total_tokens: int = field(
        default=4096, metadata={"help": "Most tokens in a prompt plus its completion (context budget)."}
    )

    def __post_init__(self) -> None:
        check_settings(
            self,
            ("max_turns", self.max_turns >= 1, ">= 1"),
            ("max_total_tokens", self.max_total_tokens >= 1, ">= 1"),
            error=ReplaySetupError,
        )


@dataclass
class Episode:
    """One rollout: the conversation as lake messages, the token-level turns, how it ended."""

    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)
    final_output: str | None = None
    status: EpisodeStatus = "ok"
    finish_reason: str = "stop"  # stop, length, max_turns, max_total_tokens, error
    error: str | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None

    @property
    def output_tokens(self) -> int:
        return sum(len(t["completion_token_ids"]) for t in self.turns)

    @property
    def input_tokens(self) -> int:
        return len(self.turns[0]["prompt_token_ids"]) if self.turns else 0


def turn_record(prompt_ids: list[int], completion: Completion) -> dict[str, Any]:
    """A lake TURN struct."""
    return {
        "prompt_token_ids": list(prompt_ids),
        "completion_token_ids": list(completion.token_ids),
        "logprobs": list(completion.logprobs),
        "finish_reason": completion.finish_reason,
    }


def turn_seed(seed: int | None, scenario_id: str, rollout: int | None = None, turn: int = 0) -> int | None:
    """The seed of one request of a group: a stable hash of the run's seed, the scenario and (after the
    first turn) the rollout and turn; None without a seed. 31 bits, non-negative: vLLM takes an
    int64, and adds a request's sample index (sample `j` uses seed + `j`).

    >>> turn_seed(7, "sc-1") == turn_seed(7, "sc-1"), turn_seed(7, "sc-1", 0, 1) != turn_seed(7, "sc-1", 1, 1)
    (True, True)
    """
    if seed is None:
        return None
    key = f"{seed}\x1f{scenario_id}\x1f{rollout}\x1f{turn}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 33


def malformed_result(call: ParsedToolCall) -> ToolResult:
    """What the model is told about a tool call it wrote badly."""
    hint = 'write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>'
    return ToolResult(f"error: malformed tool call ({call.error}): {call.raw.strip()[:200]!r}; {hint}", True)


class AgentLoop:
    """Runs groups of rollouts of scenarios on one sampler, tool source and set of limits."""

    def __init__(
        self,
        sampler: Sampler,
        tools: ToolSource,
        *,
        params: SamplingParams | None = None,
        limits: RolloutLimits | None = None,
        renderer: ChatRenderer | None = None,
    ) -> None:
        self.sampler = sampler
        self.tools = tools
        self.params = params or SamplingParams()
        self.limits = limits or RolloutLimits()
        self.renderer = renderer or ChatRenderer(sampler.tokenizer)

    async def run_group(self, scenario: Scenario, group_size: int) -> list[Episode]:
        """`group_size` rollouts of `scenario`; the first turn is one request with n = group_size
        (or, on a sampler that batches continuously, one request per sample)."""
        prompt = self.renderer.prompt_ids(scenario.messages, scenario.tools)
        budget = min(self.params.max_tokens, self.limits.max_total_tokens - len(prompt))
        if budget < 1:
            started = datetime.now(UTC)
            return [
                Episode(
                    messages=list(scenario.messages),
                    status="truncated",
                    finish_reason="max_total_tokens",
                    error=f"prompt has {len(prompt)} tokens, the limit is {self.limits.max_total_tokens}",
                    started_at=started,
                    ended_at=started,
                )
                for _ in range(group_size)
            ]
        params = self.params.with_max_tokens(budget)
        seed = turn_seed(params.seed, scenario.scenario_id)
        if self.sampler.continuous:
            # One request per sample (sample k of seed s is the one-sample request of seed s + k,
            # vLLM's convention: the same tokens), so each rollout's next turn is asked for, and
            # joins the running batch, as soon as its own first turn is done; the sampler still
            # forwards the shared prompt once.
            async def rollout(k: int) -> Episode:
                (completion,) = await self.sampler.agenerate(
                    SampleRequest(tuple(prompt), 1, params.with_seed(None if seed is None else seed + k))
                )
                return await self._continue(scenario, prompt, completion, k)

            return list(await asyncio.gather(*(rollout(k) for k in range(group_size))))
        first = await self.sampler.agenerate(SampleRequest(tuple(prompt), group_size, params.with_seed(seed)))
        return list(
            await asyncio.gather(*(self._continue(scenario, prompt, c, k) for k, c in enumerate(first)))
        )

    async def _continue(
        self, scenario: Scenario, prompt: list[int], completion: Completion, rollout: int
    ) -> Episode:
        episode = Episode(messages=list(scenario.messages))
        try:
            await self._run(scenario, episode, prompt, completion, rollout)
        except (RolloutError, ChatTemplateError):
            raise  # a broken invariant or a template that cannot replay is a bug, not a model failure
        except Exception as exc:  # a backend failure mid-rollout: recorded, the group goes on
            episode.status, episode.finish_reason = "error", "error"
            episode.error = f"{type(exc).__name__}: {exc}"
        episode.ended_at = datetime.now(UTC)
        return episode

    async def _run(
        self, scenario: Scenario, episode: Episode, prompt: list[int], completion: Completion, rollout: int
    ) -> None:
        limits = self.limits
        while True:
            turn = len(episode.turns)
            episode.turns.append(turn_record(prompt, completion))
            ids = list(completion.token_ids)
            stopped = completion.finish_reason == "stop"
            text = self.renderer.decode(
                ids[:-1] if stopped and ids and ids[-1] == self.renderer.eos_token_id else ids
            )
            if not stopped:  # cut off mid-answer: keep what was said, do not run half a tool call
                episode.messages.append(lake_message("assistant", text))
                episode.status, episode.finish_reason = "truncated", "length"
                return
            parsed = parse_assistant_text(text)
            if not parsed.tool_calls:
                episode.messages.append(lake_message("assistant", parsed.content))
                episode.final_output = parsed.content
                return
            calls = [
                lake_tool_call(f"call_{turn}_{k}", call.name, call.arguments if call.ok else call.raw)
                for k, call in enumerate(parsed.tool_calls)
            ]
            episode.messages.append(lake_message("assistant", parsed.content, tool_calls=calls))
            results = await asyncio.gather(*(self._call(call, scenario) for call in parsed.tool_calls))
            tool_messages = []
            for call, record, result in zip(parsed.tool_calls, calls, results, strict=True):
                episode.tool_calls += 1
                episode.tool_errors += result.is_error
                tool_messages.append(
                    lake_message(
                        "tool",
                        result.content,
                        name=call.name or None,
                        tool_call_id=record["id"],
                        is_error=result.is_error,
                    )
                )
            episode.messages.extend(tool_messages)
            if turn + 1 >= limits.max_turns:
                episode.status, episode.finish_reason = "truncated", "max_turns"
                return
            next_prompt = prompt + ids + self.renderer.tool_suffix_ids(tool_messages)
            if next_prompt[: len(prompt)] != prompt:  # by construction; checked because training relies on it
                raise RolloutError(
                    f"turn {turn + 1}'s prompt does not extend turn {turn}'s",
                    scenario_id=scenario.scenario_id,
                    turn=turn + 1,
                    reason="prompt_not_extended",
                )
            budget = min(self.params.max_tokens, limits.max_total_tokens - len(next_prompt))
            if budget < 1:
                episode.status, episode.finish_reason = "truncated", "max_total_tokens"
                return
            prompt = next_prompt
            seed = turn_seed(self.params.seed, scenario.scenario_id, rollout, turn + 1)
            (completion,) = await self.sampler.agenerate(
                SampleRequest(tuple(prompt), 1, self.params.with_max_tokens(budget).with_seed(seed))
            )

    async def _call(self, call: ParsedToolCall, scenario: Scenario) -> ToolResult:
        if not call.ok:
            return malformed_result(call)
        return await self.tools.call(call.name, json.loads(call.arguments), scenario)
