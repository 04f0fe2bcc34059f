"""Judging one group end to end: cache lookup, prompt, judge call, id mapping, cost.

`RulerJudge` is what the scoring stage (and the training stage's evaluation gate)
holds: one endpoint client, one cache, one concurrency limit. `score_group` never
raises for a group that fails: it returns a `GroupVerdict` with `error` set, which
the stage records as failed rows. Only `JudgeConfigError` (the judge rejects us
outright) escapes, to stop the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai

from judging.config import JudgeConfig
from judging.errors import ConfigValueError, JudgeCallError
from judging.ruler.cache import JudgeCache, cache_key
from judging.ruler.judge import JudgeClient
from judging.ruler.prompt import build_prompt
from judging.ruler.rubric import DEFAULT_RUBRIC, rubric_hash, ruler_scorer

T = TypeVar("T")


@dataclass(frozen=True)
class JudgeVerdict:
    """The judge's score for one trajectory, with the label it was shown under."""

    trajectory_id: str
    score: float
    explanation: str
    label: str


@dataclass
class GroupVerdict:
    """The outcome of judging one group: verdicts by trajectory id, or the failure reason."""

    group_id: str
    trajectory_ids: list[str]
    verdicts: dict[str, JudgeVerdict] = field(default_factory=dict)
    seed: int = 0
    cached: bool = False
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    truncated: bool = False
    error: str | None = None  # snake_case reason when the group failed
    error_detail: str | None = None
    retry_reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def group_seed(base_seed: int, group_id: str) -> int:
    """The shuffle seed of one group: derived from the run's base seed, recorded with the scores."""
    return int(hashlib.sha256(f"{base_seed}:{group_id}".encode()).hexdigest()[:8], 16)


def cost_of(config: JudgeConfig, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD spent, when prices are configured."""
    if config.input_cost_per_mtok is None and config.output_cost_per_mtok is None:
        return None
    return (
        prompt_tokens * (config.input_cost_per_mtok or 0.0)
        + completion_tokens * (config.output_cost_per_mtok or 0.0)
    ) / 1e6


class RulerJudge:
    """RULER over one OpenAI-compatible endpoint, with a durable cache and a concurrency limit."""

    def __init__(
        self,
        config: JudgeConfig,
        cache: JudgeCache | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not config.model:
            raise ConfigValueError(
                "RULER needs a judge model: name it (`--judge-model`, `judge.model` in trajlake.toml, "
                "TRAJLAKE_JUDGE__MODEL)",
                field="model",
                value=config.model,
            )
        self.config = config
        self.rubric = config.rubric if config.rubric is not None else DEFAULT_RUBRIC
        self.rubric_hash = rubric_hash(config.rubric)
        self.scorer = ruler_scorer(config.model, config.rubric)
        self.cache = cache if config.use_cache else None
        self._settling: set[asyncio.Future[None]] = set()  # verdicts being cached (`_settle`)
        self._client_arg = client
        self._client: JudgeClient | None = None
        self._limit: asyncio.Semaphore | None = None
        self._fell_back = False
        self.calls = 0  # groups sent to the judge this run (cache misses)
        self.cache_hits = 0

    @property
    def client(self) -> JudgeClient:
        if self._client is None:
            self._client = JudgeClient(self.config, self._client_arg)
        return self._client

    @property
    def fell_back_to_text(self) -> bool:
        """Whether the endpoint rejected `json_schema` and the tolerant parser took over."""
        return self._fell_back or (self._client is not None and self._client.fell_back)

    async def aclose(self) -> None:
        """Finish caching the verdicts given, then close the client."""
        if self._settling:
            await asyncio.gather(*self._settling)
        if self._client is not None:
            self._fell_back = self._fell_back or self._client.fell_back
            await self._client.close()
            self._client = None
        self._limit = None

    async def score_group(self, group_id: str, trajectories: list[dict[str, Any]]) -> GroupVerdict:
        """Judge one group (cache first). Returns a failed `GroupVerdict` rather than raising."""
        ids = [str(t["trajectory_id"]) for t in trajectories]
        seed = group_seed(self.config.seed, group_id)
        result = GroupVerdict(group_id=group_id, trajectory_ids=ids, seed=seed)
        empty = [
            tid
            for tid, t in zip(ids, trajectories, strict=True)
            if t.get("has_content") is False or not t.get("messages")
        ]
        if empty:
            # Content capture was off (or nothing was recorded): a judge would rank empty
            # conversations, so the group is a recorded failure rather than noise.
            result.error = "no_content"
            result.error_detail = f"no message content recorded for {', '.join(f'`{t}`' for t in empty)}"
            return result
        key = cache_key(self.config.model, self.rubric_hash, trajectories)
        if self.cache is None:
            verdict = await self._judge(result, trajectories, seed, ids)
            if verdict.error is None:
                self._release_slot()
            return verdict
        entry = await asyncio.to_thread(self.cache.get, key)
        ttl = self.config.timeout_s * self.config.max_attempts + 60  # a judge call's longest, then some
        held = False
        if entry is None:
            held = await asyncio.to_thread(self.cache.claim, key, ttl)
            if not held:  # another worker is judging this very group: wait for its verdict, not pay twice
                entry = await asyncio.to_thread(self.cache.wait_for, key, ttl)
                if entry is None:  # it gave up or died: take the claim over
                    held = await asyncio.to_thread(self.cache.claim, key, ttl)
        if entry is not None and set(entry.get("verdicts", {})) == set(ids):
            self.cache_hits += 1
            return self._from_cache(result, entry)
        try:
            verdict = await self._judge(result, trajectories, seed, ids)
        except BaseException:  # stopped before a verdict came back: the claim goes, nothing is cached
            if held:  # never another worker's claim
                await asyncio.to_thread(self.cache.release, key)
            raise
        # A verdict in hand ends this task now, with no await after the judge's answer: a run
        # stopped (Ctrl-C) from here on still records it. Caching it, and releasing the claim
        # after, finish in the background; `aclose` waits for them.
        settling = asyncio.ensure_future(self._settle(key, verdict, held))
        self._settling.add(settling)
        settling.add_done_callback(self._settling.discard)
        return verdict

    async def _settle(self, key: str, verdict: GroupVerdict, held: bool) -> None:
        """Cache a verdict the judge gave (never a failure), then release this worker's claim."""
        assert self.cache is not None
        try:
            if verdict.error is None:
                try:
                    await asyncio.to_thread(self.cache.put, key, self._cache_entry(verdict))
                finally:
                    self._release_slot()  # held since the judge answered (`_judge`)
        finally:
            if held:  # never another worker's claim
                await asyncio.to_thread(self.cache.release, key)

    def _release_slot(self) -> None:
        assert self._limit is not None
        self._limit.release()

    async def _judge(
        self,
        result: GroupVerdict,
        trajectories: list[dict[str, Any]],
        seed: int,
        ids: list[str],
    ) -> GroupVerdict:
        """Prompt, call the judge (under the concurrency limit), map labels to ids.

        A verdict the judge gave returns still holding its concurrency slot, which `_settle`
        releases once the verdict is cached: at any instant at most `concurrency` paid answers
        are not yet cached, so a killed run pays at most that many twice."""
        try:
            prompt = build_prompt(
                trajectories,
                self.rubric,
                seed,
                max_context_tokens=self.config.max_context_tokens,
                chars_per_token=self.config.chars_per_token,
                max_message_chars=self.config.max_message_chars,
                max_output_tokens=self.config.max_output_tokens,
            )
        except JudgeCallError as error:
            result.error, result.error_detail = error.reason, error.detail
            return result
        result.truncated = prompt.truncated
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.config.concurrency)
        await self._limit.acquire()
        self.calls += 1
        try:
            answer = await self.client.judge(prompt)
        except BaseException as error:
            self._limit.release()
            if not isinstance(error, JudgeCallError):
                raise
            result.error, result.error_detail = error.reason, error.detail
            result.attempts, result.retry_reasons = error.attempts, error.retry_reasons
            result.prompt_tokens, result.completion_tokens = error.prompt_tokens, error.completion_tokens
            result.cost_usd = cost_of(self.config, result.prompt_tokens, result.completion_tokens)
            return result
        # Match by label -> trajectory id: the order of the judge's list is never used.
        for label, (score, explanation) in answer.verdicts.items():
            tid = prompt.labels[label]
            result.verdicts[tid] = JudgeVerdict(tid, score, explanation, label)
        result.attempts, result.retry_reasons = answer.attempts, answer.retry_reasons
        result.prompt_tokens, result.completion_tokens = answer.prompt_tokens, answer.completion_tokens
        result.cost_usd = cost_of(self.config, answer.prompt_tokens, answer.completion_tokens)
        return result

    def _cache_entry(self, result: GroupVerdict) -> dict[str, Any]:
        return {
            "judge": self.config.model,
            "scorer": self.scorer,
            "group_id": result.group_id,
            "seed": result.seed,
            "truncated": result.truncated,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "cost_usd": result.cost_usd,
            "verdicts": {
                tid: {"score": v.score, "explanation": v.explanation, "label": v.label}
                for tid, v in result.verdicts.items()
            },
        }

    def _from_cache(self, result: GroupVerdict, entry: dict[str, Any]) -> GroupVerdict:
        result.cached = True
        result.seed = int(entry.get("seed", result.seed))
        result.truncated = bool(entry.get("truncated", False))
        # What the original call cost; the run's summary counts nothing for cached groups.
        result.prompt_tokens = int(entry.get("prompt_tokens") or 0)
        result.completion_tokens = int(entry.get("completion_tokens") or 0)
        result.cost_usd = entry.get("cost_usd")
        result.verdicts = {
            tid: JudgeVerdict(tid, float(v["score"]), str(v.get("explanation", "")), str(v.get("label", "")))
            for tid, v in entry["verdicts"].items()
        }
        return result


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when the calling thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="trajlake-judge")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def ruler_score_group(
    trajectories: list[dict[str, Any]],
    config: JudgeConfig,
    group_id: str = "group",
    cache: JudgeCache | None = None,
) -> GroupVerdict:
    """Judge one group synchronously (for evaluation gates and notebooks; the stage batches)."""

    async def go() -> GroupVerdict:
        judge = RulerJudge(config, cache)
        try:
            return await judge.score_group(group_id, trajectories)
        finally:
            await judge.aclose()

    return run_sync(go())
