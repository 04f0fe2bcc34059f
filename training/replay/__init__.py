"""Replay: scenarios cut from trajectories, replayed with group sampling, token-exactly.

The replay stage owns everything between a chosen trajectory and a stored group of new
ones: scenarios (`scenarios`), sampler backends (`samplers`: transformers, vLLM server,
vLLM engine), the agent loop and tool sources (`rollout`), and the stage itself
(`stage`), which writes each group to `trajectories` with its token ids and logprobs.
It imports nothing from the trainers; GRPO reads what it wrote from the lake. What it
shares with them (chat rendering, model resolution, policy names, adapter files) it imports
from `training.chat` and `training.models`. The samplers and the rollout loop import no
lake library.

Public surface (the CLI and the Prefect flows call these):

- `replay(lake, scenarios_sql, sampler, ReplayConfig(...)) -> ReplayResult`, `areplay`
- `create_scenarios(lake, sql, ScenarioConfig(...))`, `load_scenarios(lake, path)`,
  `read_scenarios(lake, sql)`, `slice_selection(lake, sql, size, index)` (a round's share),
  `shard_selection(sql, shard, shards)` (a task's share), `Scenario`
- `make_sampler(backend, model, **options)`, `SamplerConfig`, `SamplingParams`
- `make_tools(callables, recorded=True)`, `ToolsConfig`
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use: the samplers and the rollout loop run without the lake libraries
# (a GPU machine benchmarking them has none); scenarios and the stage read and write the lake.
_PUBLIC = {
    **dict.fromkeys(
        (
            "ReplayError",
            "ReplaySetupError",
            "RolloutError",
            "SamplerError",
            "ScenarioError",
            "ToolSourceError",
        ),
        "training.replay.errors",
    ),
    **dict.fromkeys(("ToolsConfig", "make_tools"), "training.replay.rollout.tools"),
    "RolloutLimits": "training.replay.rollout.loop",
    **dict.fromkeys(
        ("BACKENDS", "SamplerConfig", "SamplingParams", "make_sampler"), "training.replay.samplers"
    ),
    **dict.fromkeys(
        ("create_scenarios", "load_scenarios", "read_scenarios", "shard_selection", "slice_selection"),
        "training.replay.scenario_io",
    ),
    **dict.fromkeys(("Scenario", "ScenarioConfig", "ScenarioResult"), "training.replay.scenarios"),
    **dict.fromkeys(
        ("ReplayConfig", "ReplayResult", "areplay", "replay", "sampled_groups"), "training.replay.stage"
    ),
}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module `training.replay` has no attribute `{name}`")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


__all__ = [
    "BACKENDS",
    "ReplayConfig",
    "ReplayError",
    "ReplayResult",
    "ReplaySetupError",
    "RolloutError",
    "RolloutLimits",
    "SamplerConfig",
    "SamplerError",
    "SamplingParams",
    "Scenario",
    "ScenarioConfig",
    "ScenarioError",
    "ScenarioResult",
    "ToolSourceError",
    "ToolsConfig",
    "areplay",
    "create_scenarios",
    "load_scenarios",
    "make_sampler",
    "make_tools",
    "read_scenarios",
    "replay",
    "sampled_groups",
    "slice_selection",
]
