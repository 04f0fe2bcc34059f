"""The tables that belong to the flow itself (not to a library): the lake and its SQL limits
(`[lake]`), what each stage selects (`[select]`), which rewards score a round (`[score]`),
how policies are measured (`[evaluate]`), the loop's switches (`[pipeline]`), the schedules.
`flows.config` reads them with every library's tables."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from store.errors import check_settings
from store.lake import DEFAULT_LAKE
from store.sampling import is_temperature
from store.selections import PRODUCTION_TRAJECTORIES, SFT_TRAJECTORIES, TRAIN_SCENARIOS, VAL_SCENARIOS


def _help(text: str, default: Any = None, factory: Any = None, **metadata: Any) -> Any:
    if factory is not None:
        return field(default_factory=factory, metadata={"help": text, **metadata})
    return field(default=default, metadata={"help": text, **metadata})


# A memory size as DuckDB's `SET memory_limit` reads it.
MEMORY_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class LakeSettings:
    path: str = _help(
        "Lake directory or object-store URL.", DEFAULT_LAKE, variable="TRAJLAKE_LAKE", path=True
    )
    sql_lake_only: bool = _help(
        "SQL may read the lake's tables and nothing else: no local file, other bucket or URL "
        "(DuckDB external access off). Always on under `trajlake serve`.",
        False,
    )
    sql_timeout_s: float = _help(
        "Seconds a `trajlake sql` query may run before it is interrupted (0: no limit).",
        300.0,
    )
    sql_memory_limit: str = _help(
        "DuckDB memory limit of a `trajlake sql` connection (`4GB`; empty: DuckDB's default, 80% of RAM). "
        "Nothing spills to disk: past the limit a query fails.",
        "4GB",
    )

    def __post_init__(self) -> None:
        check_settings(
            self,
            ("sql_timeout_s", math.isfinite(self.sql_timeout_s) and self.sql_timeout_s >= 0, ">= 0 seconds"),
            (
                "sql_memory_limit",
                not self.sql_memory_limit.strip() or MEMORY_SIZE.fullmatch(self.sql_memory_limit) is not None,
                "a size DuckDB reads (`4GB`, `512MiB`) or empty",
            ),
        )


@dataclass(frozen=True)
class Selections:
    """What each stage of the pipeline works on: SQL over the lake's views."""

    scenarios: str = _help(
        "SELECT returning the `trajectory_id`s whose prompt prefixes become scenarios.",
        PRODUCTION_TRAJECTORIES,
    )
    replay: str = _help("SELECT returning the `scenario_id`s each round replays.", TRAIN_SCENARIOS)
    sft: str = _help("SELECT returning the `trajectory_id`s SFT imitates.", SFT_TRAJECTORIES)
    evaluate: str = _help("SELECT returning the `scenario_id`s the evaluation replays.", VAL_SCENARIOS)


@dataclass(frozen=True)
class ScoreSettings:
    """Which rewards score each round, and which one training and evaluation use."""

    rewards: list[str] = _help(
        "Rewards to score replayed groups with: `ruler` (the [judge] table), a built-in name or "
        "`package.module:function`.",
        factory=lambda: ["exact_match"],
    )
    reward: str = _help(
        "The reward GRPO trains on: one of `rewards`, as its spec or its name (`unit` for "
        "`units:unit_reward`), or `combined`.",
        "exact_match",
    )
    weights: dict[str, float] = _help(
        "Weights of scored rewards (each a spec or its name) combined into `combined`.", factory=dict
    )


@dataclass(frozen=True)
class EvaluateSettings:
    """How policies are measured on the val scenarios (`select.evaluate`) and against production."""

    reward: str = _help(
        "The success metric compared on the val scenarios: a reward spec (`exact_match`, "
        "`package.module:function`) or the name of a scored reward (empty: `score.reward`).",
        "",
    )
    group_size: int = _help("Samples per val scenario (0: `replay.group_size`).", 0)
    temperature: float = _help(
        "Temperature of the sampled evaluation: the one production serves at, when training replays "
        "explore at another (0: `replay.sampling.temperature`).",
        0.0,
    )
    greedy: bool = _help(
        "Also measure every policy greedily (temperature 0, one sample per val scenario), as most "
        "production serves: both successes are in the table, the gate reads the sampled one.",
        True,
    )
    stages: bool = _help(
        "Evaluate every stage of a pipeline run (base model, SFT, each GRPO round): the learning curve "
        "with paired differences; off: only the candidate and the adapter it would replace.",
        True,
    )
    intermediate: bool = _help(
        "With `stages`, also evaluate the stages between the ends: every GRPO round before the last, "
        "and the base model when the run continues an adapter; off: where the run started, SFT and "
        "the candidate (each policy measured costs as much as the candidate).",
        True,
    )
    production_reward: str = _help(
        "Reward of production trajectories saying whether they succeeded (ingested user feedback): "
        "each production policy's success, the reference the adapters are measured against.",
        "user_feedback",
    )

    def __post_init__(self) -> None:
        # 0 stands for `replay.group_size`; any other value is checked by the replay (`flows.config`)
        check_settings(
            self,
            ("group_size", self.group_size >= 0, ">= 0"),
            ("temperature", is_temperature(self.temperature), ">= 0 (0: `replay.sampling.temperature`)"),
        )


@dataclass(frozen=True)
class PipelineSettings:
    """The loop: stage switches, rounds, the publish gate, the task runner."""

    langfuse: bool = _help("Pull new traces from the `[langfuse]` server before each run.", False)
    sft: bool = _help("Run SFT before GRPO when a run starts from the base model.", True)
    grpo: bool = _help("Run GRPO on replayed, scored groups each round.", True)
    rounds: int = _help("Replay -> score -> GRPO rounds per pipeline run.", 1)
    # Night after night: where each run starts and what it learns from
    start_from: Literal["production", "base"] = _help(
        "Where each run starts: `production` continues the adapter holding the `production` alias (its "
        "lineage extended; the base model while none is), `base` trains from the base model (SFT on all "
        "selected data, then GRPO).",
        "production",
    )
    sft_on_production: bool = _help(
        "When a run continues the production adapter, SFT it on the window's conversations before "
        "GRPO (off: GRPO only; SFT runs when a run starts from the base model).",
        False,
    )
    sft_excludes_replayed: bool = _help(
        "SFT leaves out the conversations this run's GRPO rounds replay as scenarios (every round's "
        "slice, dynamic-sampling draws included): a policy answers a conversation it imitated the same "
        "way every sample, so its groups there have equal rewards and give GRPO nothing (off: SFT reads "
        "all of `select.sft`).",
        False,
    )
    window_days: float = _help(
        "What a run learns from: the scenarios (and, for SFT on the production adapter, the production "
        "conversations) new since the last finished run, plus those of this many days before it "
        "(-1: everything selected, every run).",
        7.0,
    )
    scenarios_per_round: int = _help(
        "Replay this many of the `select.replay` scenarios per round, a new slice each round "
        "(0: all of them every round).",
        0,
    )
    dynamic_sampling_draws: int = _help(
        "Dynamic sampling (DAPO), bounded: while fewer than `scenarios_per_round` of a round's groups "
        "have unequal rewards, replay up to this many further slices (0: off).",
        0,
    )
    require_improvement: bool = _help(
        "Promote to `production` only when the paired val comparison is above zero.", True
    )
    latest_if_refused: bool = _help(
        "Move `latest` to a version the gate refused too (off: `latest` and `production` move only "
        "with a promoted version; a refused one is published under its version number alone).",
        False,
    )
    work_dir: str = _help("Where checkpoints and adapters go (default: <lake>/_work).", "", path=True)
    keep_checkpoints: bool = _help(
        "Keep a finished run's training checkpoints (optimizer states; off: deleted when the run "
        "finishes, its adapters kept, so nightly runs do not fill the disk).",
        False,
    )
    task_runner: Literal["threads", "dask", "ray"] = _help("Prefect task runner.", "threads")
    max_workers: int = _help(
        "Threads of the thread-pool task runner; worker processes of a local Dask cluster.", 4
    )
    dask_address: str = _help(
        'Address of a running Dask scheduler (`tcp://host:8786`) for `task_runner = "dask"`; empty: '
        "a local cluster of `max_workers` processes.",
        "",
    )
    replay_shards: int = _help(
        "Tasks each round's replay and scoring are split into, by scenario (1: one task); on a Dask or "
        "Ray runner they run on its workers, each writing whole groups.",
        1,
    )

    def __post_init__(self) -> None:
        check_settings(
            self,
            ("rounds", self.rounds >= 1, ">= 1"),
            ("scenarios_per_round", self.scenarios_per_round >= 0, ">= 0"),
            ("dynamic_sampling_draws", self.dynamic_sampling_draws >= 0, ">= 0"),
            ("max_workers", self.max_workers >= 1, ">= 1"),
            ("replay_shards", self.replay_shards >= 1, ">= 1"),
        )


@dataclass(frozen=True)
class Schedules:
    ingest: str = _help("Cron of the ingest deployment.", "0 * * * *")
    pipeline: str = _help("Cron of the nightly pipeline deployment.", "0 3 * * *")
    timezone: str = _help("Time zone of the crons.", "UTC")
