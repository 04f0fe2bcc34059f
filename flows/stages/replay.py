"""Replay stages: scenarios from the selected trajectories, and one round of group sampling."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from flows.config.root import Settings
from flows.config.sections import PipelineSettings, Selections
from flows.stages.common import StageError, sampler_for
from store.lake import Lake
from training.replay.rollout.tools import ToolsConfig
from training.replay.samplers import SamplerConfig
from training.replay.scenarios import ScenarioConfig
from training.replay.stage import ReplayConfig, replay_passes

if TYPE_CHECKING:
    from flows.stages.score import RoundScores
    from judging.summary import RewardStats


@dataclasses.dataclass(frozen=True)
class ReplaySections:
    """The sections every replay of a policy reads, which travel together: the sampler backend and
    base model (`[sampler]`), groups, sampling and limits (`[replay]`), the agent's tools (`[tools]`)."""

    sampler: SamplerConfig
    replay: ReplayConfig
    tools: ToolsConfig

    @classmethod
    def of(cls, settings: Settings) -> ReplaySections:
        """The three sections of `settings`."""
        return cls(settings.sampler, settings.replay, settings.tools)


@dataclasses.dataclass(frozen=True)
class ScenarioCounts:
    """What the scenarios step wrote: scenarios per split, and the trajectories it skipped."""

    train: int
    val: int
    skipped: int


@dataclasses.dataclass(frozen=True)
class PolicyReplay:
    """What one replay of a policy sampled: a round (its shards and dynamic-sampling draws merged)
    or an evaluation's replay of the val scenarios."""

    policy: str
    group_ids: list[str]
    trajectories: int
    generated_tokens: int
    failed: int  # scenarios no group was sampled for (a sampler error): left for the next run
    seconds: float
    draws: int = 0  # further dynamic-sampling draws merged into the round
    failure: str = ""  # the first failed scenario's error, in one line

    @property
    def groups(self) -> int:
        return len(self.group_ids)

    def merged(self, more: PolicyReplay, *, extra_draw: bool) -> PolicyReplay:
        """This replay and `more` as one: their groups together, their counts summed (`extra_draw`:
        `more` was a further dynamic-sampling draw, not another shard of the same one)."""
        return PolicyReplay(
            policy=self.policy,
            group_ids=[*self.group_ids, *more.group_ids],
            trajectories=self.trajectories + more.trajectories,
            generated_tokens=self.generated_tokens + more.generated_tokens,
            failed=self.failed + more.failed,
            seconds=self.seconds + more.seconds,
            draws=self.draws + 1 if extra_draw else self.draws,
            failure=self.failure or more.failure,
        )

    def failure_text(self, what: str) -> str:
        """`what` said in words when scenarios failed to replay ("" when none did)."""
        if not self.failed:
            return ""
        return (
            f"{what}: {self.failed} of {self.groups + self.failed} scenarios could not be replayed "
            f"(first: {self.failure}); the next run replays them"
        )


@dataclasses.dataclass(frozen=True)
class RoundSummary:
    """One round of the pipeline as its result and artifact show it: the policy that sampled, what
    it sampled, and the training reward over the round's groups."""

    round: int
    policy: str
    groups: int
    trajectories: int
    mean_reward: float
    std_reward: float
    equal_reward_groups: int
    useless_share: float  # groups with all-equal rewards: no GRPO signal
    extra_draws: int
    failed_scenarios: int  # scenarios the round could not replay (a sampler error)

    @classmethod
    def of(cls, round_number: int, replayed: PolicyReplay, stats: RewardStats) -> RoundSummary:
        """The summary of round `round_number` from its replay and its reward stats."""
        return cls(
            round=round_number,
            policy=replayed.policy,
            groups=replayed.groups,
            trajectories=replayed.trajectories,
            mean_reward=stats.mean,
            std_reward=stats.std,
            equal_reward_groups=stats.equal_groups,
            useless_share=stats.equal_groups / max(1, replayed.groups),
            extra_draws=replayed.draws,
            failed_scenarios=replayed.failed,
        )


def make_scenarios(lake: Lake, *, select: Selections, scenarios: ScenarioConfig) -> ScenarioCounts:
    """Scenarios from the trajectories `select.scenarios` picks (idempotent: same ids, same split)."""
    from training.replay.scenario_io import create_scenarios

    result = create_scenarios(lake, select.scenarios, scenarios)
    if not result.splits.get("train"):
        example = f", e.g. `{result.skipped[0][0]}`: {result.skipped[0][1]}" if result.skipped else ""
        raise StageError(
            "select.scenarios",
            f"no train scenarios ({len(result.skipped)} trajectories skipped{example}); "
            "check the selection and that production trajectories have content",
        )
    return ScenarioCounts(
        train=result.splits.get("train", 0), val=result.splits.get("val", 0), skipped=len(result.skipped)
    )


def evaluation_replays(
    lake: Lake,
    adapter: str | None,
    scenarios: str,
    *,
    run: str,
    seed: int,
    group_size: int | None = None,
    temperature: float | None = None,
    greedy: bool = False,
    replaying: ReplaySections,
) -> tuple[PolicyReplay, PolicyReplay | None]:
    """An evaluation's replays of one policy: its groups (`group_size` samples at `temperature`)
    and, with `greedy`, one greedy sample per scenario, sampled together (`replay_passes`: they
    share the sampler's batches); resumable (complete groups are skipped)."""
    configs = [_pass_config(replaying.replay, run, seed, group_size, temperature, greedy=False)]
    if greedy:
        configs.append(_pass_config(replaying.replay, run, seed, None, None, greedy=True))
    replayed = replay_passes_of_policy(lake, adapter, scenarios, configs, replaying=replaying)
    return replayed[0], (replayed[1] if greedy else None)


def _pass_config(
    configured: ReplayConfig,
    run: str,
    seed: int,
    group_size: int | None,
    temperature: float | None,
    greedy: bool,
) -> ReplayConfig:
    """The replay config of one pass: the configured one under `run` and `seed`, with its group
    size and temperature where given; greedy: one sample per scenario at temperature 0."""
    configured = dataclasses.replace(configured, run=run, group_size=group_size or configured.group_size)
    sampling = configured.sampling.with_seed(seed)
    if temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=temperature)
    if greedy:
        sampling = dataclasses.replace(sampling, temperature=0.0)
        return dataclasses.replace(configured, group_size=1, sampling=sampling, greedy=True)
    return dataclasses.replace(configured, sampling=sampling)


def replay_passes_of_policy(
    lake: Lake,
    adapter: str | None,
    scenarios: str,
    configs: list[ReplayConfig],
    *,
    replaying: ReplaySections,
) -> list[PolicyReplay]:
    """Each of `configs` replayed with one sampler of the base model or `adapter`, at once."""
    with sampler_for(replaying.sampler, adapter) as sampler:
        results = replay_passes(lake, scenarios, sampler, configs, tools=replaying.tools.build())
        policy = sampler.policy
    replayed = []
    for config, result in zip(configs, results, strict=True):
        group_ids = [*result.group_ids, *result.skipped_group_ids]
        if not group_ids:
            failure = f": {result.failed[0][1]}" if result.failed else ""
            raise StageError("select.replay", f"no group was sampled{failure}")
        replayed.append(
            PolicyReplay(
                policy=policy,
                group_ids=group_ids,
                trajectories=len(group_ids) * config.group_size,
                generated_tokens=result.generated_tokens,
                failed=len(result.failed),
                seconds=round(result.elapsed_s, 2),
                failure=(result.failed[0][1].splitlines() or [""])[0][:300] if result.failed else "",
            )
        )
    return replayed


def round_scenarios(
    lake: Lake, round_number: int, draw: int = 0, *, select: Selections, pipeline: PipelineSettings
) -> str:
    """`select.replay`, or this round's slice of it (and of a dynamic-sampling draw) with `scenarios_per_round`."""
    from training.replay.scenario_io import slice_selection

    index = (round_number - 1) * (1 + pipeline.dynamic_sampling_draws) + draw
    return slice_selection(lake, select.replay, pipeline.scenarios_per_round, max(index, 0))


def run_scenarios(lake: Lake, rounds: int, *, select: Selections, pipeline: PipelineSettings) -> str:
    """Every scenario a run of `rounds` rounds may replay: the union of each round's slice and of its
    dynamic-sampling draws (`round_scenarios`), or `select.replay` without `scenarios_per_round`."""
    if pipeline.scenarios_per_round <= 0:
        return select.replay
    slices = [
        round_scenarios(lake, n, draw, select=select, pipeline=pipeline)
        for n in range(1, rounds + 1)
        for draw in range(pipeline.dynamic_sampling_draws + 1)
    ]
    return " UNION ".join(f"SELECT scenario_id FROM ({s})" for s in slices)


def replay_round(
    lake: Lake,
    adapter: str | None,
    round_number: int,
    draw: int = 0,
    shard: int = 0,
    shards: int = 1,
    *,
    select: Selections,
    pipeline: PipelineSettings,
    replaying: ReplaySections,
) -> PolicyReplay:
    """One round's group sampling of the train scenarios with the current policy (`draw` > 0: a dynamic-
    sampling draw of further scenarios for the same round; `shard` of `shards`: that share of its
    scenarios). Seeds and group ids come from the scenario, so shards sample what one task would."""
    from training.replay.scenario_io import shard_selection

    seed = (replaying.replay.sampling.seed or 0) + round_number + 1000 * draw
    run = f"round-{round_number}" + (f"-draw-{draw}" if draw else "")
    scenarios = round_scenarios(lake, round_number, draw, select=select, pipeline=pipeline)
    if shards > 1:
        scenarios = shard_selection(scenarios, shard, shards)
    config = _pass_config(replaying.replay, run, seed, group_size=None, temperature=None, greedy=False)
    return replay_passes_of_policy(lake, adapter, scenarios, [config], replaying=replaying)[0]


def merge_shards(results: list[PolicyReplay]) -> PolicyReplay:
    """A round's replay result from its shards' (their groups together; a shard with none is fine)."""
    sampled = [r for r in results if r.groups]
    if not sampled:
        raise StageError("select.replay", "no group was sampled in any shard")
    merged = sampled[0]
    for more in sampled[1:]:
        merged = merged.merged(more, extra_draw=False)
    return merged


def sample_round(
    adapter: str | None,
    round_number: int,
    *,
    pipeline: PipelineSettings,
    replay: Callable[[str | None, int, int], PolicyReplay],
    score: Callable[[list[str], int], RoundScores],
) -> tuple[PolicyReplay, RoundScores]:
    """One round's groups, replayed and scored: (replay result, score stats of all its groups).

    Dynamic sampling (DAPO), bounded: while fewer than `pipeline.scenarios_per_round` (or
    the first draw's count) of the round's groups have unequal rewards, GRPO's only signal,
    replay the next slice of scenarios, at most `pipeline.dynamic_sampling_draws` times.
    `replay(adapter, round_number, draw)` and `score(group_ids, round_number)` are what the flow
    runs as tasks (`replay_round` and `score_round` on its lake and sections, one after the other,
    do the same)."""
    replayed = replay(adapter, round_number, 0)
    scored = score(replayed.group_ids, round_number)
    wanted = pipeline.scenarios_per_round or replayed.groups
    for draw in range(1, pipeline.dynamic_sampling_draws + 1):
        if replayed.groups - scored.stats.equal_groups >= wanted:
            break
        replayed = replayed.merged(replay(adapter, round_number, draw), extra_draw=True)
        scored = score(replayed.group_ids, round_number)
    return replayed, scored
