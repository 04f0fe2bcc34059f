"""Group sampling: G new trajectories per scenario, token-exact, written a whole group at a time.

`replay(lake, scenarios, sampler, config)` runs the agent loop (or a user rollout function)
for every scenario, `concurrency` scenarios at a time, and writes each group of
`group_size` trajectories to the lake with `source = 'replay'`, `scenario_id`, `group_id`,
`policy`, `turns` (prompt/completion token ids, logprobs, finish reason per model call),
`messages` decoded from the sampled tokens and `final_output`.

Resumable: a group's id hashes the scenario, the policy, the run name and the group size,
so a re-run computes the same ids, finds the groups already complete in the lake and skips
them. A group is written in one atomic write together with other complete groups, never
split, so a kill loses at most the groups still in memory, never half a group. A group
whose every rollout failed in the backend is not written (the re-run retries it).

To evaluate an adapter, replay the validation scenarios through it:

    sampler = make_sampler("transformers", base_model, adapter="adapters/v3")
    replay(lake, "SELECT scenario_id FROM scenarios WHERE split = 'val'", sampler,
           ReplayConfig(group_size=4, run="eval-v3", sampling=SamplingParams(temperature=0.8)))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from store.catalog.connection import connect
from store.errors import check_settings
from store.lake import Lake
from store.migrate import check_migrated
from store.sampling import GREEDY, GROUP_TEMPERATURE_RULE, is_group_temperature
from store.vocabulary import equals
from store.writer import write
from training.replay.errors import ReplaySetupError
from training.replay.rollout.loop import AgentLoop, RolloutLimits
from training.replay.rollout.tools import ToolSource, make_tools
from training.replay.rollout.user import UserRollouts
from training.replay.rows import episode_row, group_id_for, sampling_record
from training.replay.samplers.base import Sampler, SamplingParams
from training.replay.scenario_io import read_scenarios
from training.replay.scenarios import Scenario

# A group's samples are one request (`n`) and one training batch's rows: past this it is a typo.
MAX_GROUP_SIZE = 1024


@dataclass(frozen=True)
class ReplayConfig:
    """How to sample groups: `[replay]`, with `[replay.sampling]` and `[replay.limits]`."""

    group_size: int = field(
        default=4,
        metadata={
            "help": "Trajectories sampled per scenario (G); GRPO compares them, so >= 2 (at most 1024)."
        },
    )
    run: str = field(
        default="default",
        metadata={"help": "Replay run name; part of the group id, so a new name samples new groups."},
    )
    # The sampler's own parameters and the loop's own bounds, declared (and checked) where they live;
    # their options keep plain names (`--temperature`, `--max-turns`).
    sampling: SamplingParams = field(default_factory=SamplingParams, metadata={"cli_prefix": ""})
    limits: RolloutLimits = field(default_factory=RolloutLimits, metadata={"cli_prefix": ""})
    concurrency: int = field(default=8, metadata={"help": "Scenarios sampled at the same time."})
    flush_groups: int = field(default=16, metadata={"help": "Complete groups gathered per lake write."})
    greedy: bool = field(
        default=False,
        metadata={
            "help": "An evaluation's greedy replay: one sample per scenario at temperature 0 (no GRPO "
            "group: it has no spread); the evaluation sets it (`evaluate.greedy`)."
        },
    )

    def __post_init__(self) -> None:
        if self.greedy:
            check_settings(
                self,
                ("group_size", self.group_size == 1, "1 for a greedy replay"),
                ("sampling.temperature", self.sampling.temperature == GREEDY, "0 for a greedy replay"),
                error=ReplaySetupError,
            )
            return
        check_settings(
            self,
            (
                "group_size",
                2 <= self.group_size <= MAX_GROUP_SIZE,
                f">= 2 and at most {MAX_GROUP_SIZE}: GRPO compares the samples of a group, sampled at once",
            ),
            ("concurrency", self.concurrency >= 1, ">= 1"),
            ("flush_groups", self.flush_groups >= 1, ">= 1"),
            ("sampling.temperature", is_group_temperature(self.sampling.temperature), GROUP_TEMPERATURE_RULE),
            error=ReplaySetupError,
        )


@dataclass
class ReplayResult:
    """What a replay did."""

    group_ids: list[str] = field(default_factory=list)  # written by this call
    skipped_group_ids: list[str] = field(default_factory=list)  # already complete in the lake
    failed: list[tuple[str, str]] = field(default_factory=list)  # (scenario_id, error) not written
    trajectory_ids: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    elapsed_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.elapsed_s if self.elapsed_s else 0.0


def sampled_groups(
    con: Any, scenario_ids: Sequence[str], policy: str, config: ReplayConfig
) -> dict[str, str]:
    """scenario id -> the id of its group already complete in the lake for this replay: sampled by
    `policy` in run `config.run` at `config.group_size` from the same distribution, found by the
    typed columns (`replay_run`, `sampling`), so a re-run resumes whichever trajlake named the
    group. Refuses a lake whose replayed rows predate those columns (`trajlake migrate`)."""
    if not scenario_ids:
        return {}
    check_migrated(con, "trajectories")
    temperature, top_p, top_k = sampling_record(config.sampling).distribution
    con.register("wanted", pa.table({"scenario_id": pa.array(list(scenario_ids), pa.string())}))
    try:
        rows = con.execute(
            "SELECT t.scenario_id, t.group_id FROM trajectories t JOIN wanted w USING (scenario_id) "
            f"WHERE {equals('t.source', 'replay', table='trajectories')} AND t.policy = $policy "
            "AND t.replay_run = $run AND t.sampling.temperature = $temperature "
            "AND t.sampling.top_p = $top_p AND t.sampling.top_k = $top_k "
            "GROUP BY t.scenario_id, t.group_id HAVING count(*) = $size ORDER BY t.group_id",
            {
                "policy": policy,
                "run": config.run,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
                "size": config.group_size,
            },
        ).fetchall()
    finally:
        con.unregister("wanted")
    return dict(rows)


# --- the stage ------------------------------------------------------------------------------------


RolloutRunner = Callable[[Scenario, int], Any]  # async (scenario, group_size) -> list[Episode]


async def areplay(
    lake: Lake | str,
    scenarios: str | Sequence[Scenario],
    sampler: Sampler,
    config: ReplayConfig | None = None,
    *,
    tools: ToolSource | None = None,
    rollout: str | Callable[..., Any] | None = None,
    progress: bool = True,
    close_sampler: bool = True,
) -> ReplayResult:
    """`replay` for callers already inside an event loop (`close_sampler=False`: the sampler's
    HTTP pools stay open for other replays running beside this one)."""
    config = config or ReplayConfig()
    # One connection for both lookups: each connect lists the lake's files.
    con = connect(lake, read_only=True)
    try:
        chosen = read_scenarios(lake, scenarios, con=con) if isinstance(scenarios, str) else list(scenarios)
        if isinstance(scenarios, str) and not chosen:
            raise ReplaySetupError(
                f"the scenario selection returned no scenarios: {scenarios}", reason="no_scenarios"
            )
        done = sampled_groups(con, [s.scenario_id for s in chosen], sampler.policy, config)
        ids = {
            s.scenario_id: done.get(s.scenario_id)
            or group_id_for(s.scenario_id, sampler.policy, config.run, config.group_size, config.sampling)
            for s in chosen
        }
    finally:
        con.close()
    tools = tools or make_tools()
    runner: Any
    if rollout is not None:
        runner = UserRollouts(sampler, rollout, params=config.sampling, limits=config.limits)
        tools_desc = f"rollout:{runner.describe()}"
    else:
        runner = AgentLoop(sampler, tools, params=config.sampling, limits=config.limits)
        tools_desc = tools.describe()

    result = ReplayResult()
    started = time.perf_counter()
    todo = [s for s in chosen if s.scenario_id not in done]
    result.skipped_group_ids = [done[s.scenario_id] for s in chosen if s.scenario_id in done]

    buffer: list[list[dict[str, Any]]] = []
    write_lock = asyncio.Lock()

    async def flush() -> None:
        async with write_lock:
            if not buffer:
                return
            groups, buffer[:] = list(buffer), []
            rows = [row for group in groups for row in group]
            await asyncio.to_thread(write, lake, "trajectories", rows)
            for group in groups:
                result.group_ids.append(group[0]["group_id"])
                result.trajectory_ids.extend(r["trajectory_id"] for r in group)

    semaphore = asyncio.Semaphore(config.concurrency)
    bar = _progress(progress, len(todo), sampler)

    async def one(scenario: Scenario) -> None:
        async with semaphore:
            group_id = ids[scenario.scenario_id]
            try:
                episodes = await runner.run_group(scenario, config.group_size)
            except Exception as exc:  # recorded and retried on the next run, never half-written
                result.failed.append((scenario.scenario_id, f"{type(exc).__name__}: {exc}"))
                bar.advance()
                return
            if all(e.status == "error" for e in episodes):
                result.failed.append((scenario.scenario_id, episodes[0].error or "every rollout failed"))
                bar.advance()
                return
            rows = [
                episode_row(
                    e,
                    scenario=scenario,
                    group_id=group_id,
                    index=i,
                    sampler=sampler,
                    config=config,
                    tools=tools_desc,
                )
                for i, e in enumerate(episodes)
            ]
            result.generated_tokens += sum(e.output_tokens for e in episodes)
            buffer.append(rows)
            bar.advance(tokens=result.generated_tokens)
        if len(buffer) >= config.flush_groups:
            await flush()

    try:
        with bar:
            await asyncio.gather(*(one(s) for s in todo))
    finally:
        # Whatever completed is kept even when the run is interrupted.
        await flush()
        if hasattr(runner, "close"):
            runner.close()
        if close_sampler and hasattr(sampler, "aclose"):  # HTTP pools belong to this event loop
            await sampler.aclose()
    result.elapsed_s = time.perf_counter() - started
    return result


def replay(
    lake: Lake | str,
    scenarios: str | Sequence[Scenario],
    sampler: Sampler,
    config: ReplayConfig | None = None,
    *,
    tools: ToolSource | None = None,
    rollout: str | Callable[..., Any] | None = None,
    progress: bool = True,
) -> ReplayResult:
    """Sample `config.group_size` trajectories for every scenario and write them, a whole group at a time.

    `scenarios` is SQL over the lake's views returning `scenario_id` (e.g. `SELECT scenario_id
    FROM scenarios WHERE split = 'train'`) or a list of `Scenario`s. Tools default to the
    results recorded in each scenario's source trajectory; `rollout` (`package.module:function`
    or a callable) runs a user agent against an OpenAI-compatible client bound to `sampler`
    instead of the built-in loop.
    """
    return asyncio.run(
        areplay(lake, scenarios, sampler, config, tools=tools, rollout=rollout, progress=progress)
    )


def replay_passes(
    lake: Lake | str,
    scenarios: str | Sequence[Scenario],
    sampler: Sampler,
    configs: Sequence[ReplayConfig],
    *,
    tools: ToolSource | None = None,
    progress: bool = False,
) -> list[ReplayResult]:
    """Several replays of the same scenarios through one sampler at once, one result per config,
    each written and resumed as `replay` writes and resumes it: an evaluation's sampled groups
    and its greedy samples. Their requests meet in the sampler's batches, so a scenario's
    prompt is forwarded once for both and the greedy rows ride the sampled rows' decode steps
    (an adapter of SmolLM2 on 64 val scenarios, 2 samples and a greedy one each: 37.4 s sampled
    and 32.4 s greedy apart, 48.2 s together, on 2 cores)."""

    async def run() -> list[ReplayResult]:
        try:
            passes = (
                areplay(lake, scenarios, sampler, config, tools=tools, progress=progress, close_sampler=False)
                for config in configs
            )
            return list(await asyncio.gather(*passes))
        finally:
            if hasattr(sampler, "aclose"):
                await sampler.aclose()

    return asyncio.run(run())


class _Progress:
    """A rich progress bar (or nothing), advanced once per finished group."""

    def __init__(self, enabled: bool, total: int, sampler: Sampler) -> None:
        self._bar: Any = None
        if enabled and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("replay"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("groups · {task.fields[tokens]} tokens"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._bar.add_task("replay", total=total, tokens=0)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, tokens: int | None = None) -> None:
        if self._bar is not None:
            fields = {"tokens": tokens} if tokens is not None else {}
            self._bar.update(self._task, advance=1, **fields)


def _progress(enabled: bool, total: int, sampler: Sampler) -> _Progress:
    return _Progress(enabled, total, sampler)
