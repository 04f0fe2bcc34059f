"""Replay: scenarios cut from trajectories, replayed with group sampling, token-exactly.

The replay stage owns everything between a chosen trajectory and a stored group of new
ones: scenarios (`scenarios`), sampler backends (`samplers`: transformers, vLLM server,
vLLM engine), the agent loop and tool sources (`rollout`), and the stage itself
(`stage`), which writes each group to `trajectories` with its token ids and logprobs.
It imports nothing from the trainers; GRPO reads what it wrote from the lake.

Public surface (the CLI and the Prefect flows call these):

- `replay(lake, scenarios_sql, sampler, ReplayConfig(...)) -> ReplayResult`, `areplay`
- `create_scenarios(lake, sql, ScenarioConfig(...))`, `load_scenarios(lake, path)`,
  `read_scenarios(lake, sql)`, `slice_selection(lake, sql, size, index)` (a round's share), `Scenario`
- `make_sampler(backend, model, **options)`, `SamplerConfig`, `SamplingParams`
- `make_tools(callables, recorded=True)`, `ToolsConfig`
"""

from training.replay.errors import (
    ReplayError,
    ReplaySetupError,
    RolloutError,
    SamplerError,
    ScenarioError,
    ToolSourceError,
)
from training.replay.rollout.tools import ToolsConfig, make_tools
from training.replay.samplers import BACKENDS, SamplerConfig, SamplingParams, make_sampler
from training.replay.scenario_io import create_scenarios, load_scenarios, read_scenarios, slice_selection
from training.replay.scenarios import Scenario, ScenarioConfig, ScenarioResult
from training.replay.stage import ReplayConfig, ReplayResult, areplay, complete_groups, replay

__all__ = [
    "BACKENDS",
    "ReplayConfig",
    "ReplayError",
    "ReplayResult",
    "ReplaySetupError",
    "RolloutError",
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
    "complete_groups",
    "create_scenarios",
    "load_scenarios",
    "make_sampler",
    "make_tools",
    "read_scenarios",
    "replay",
    "slice_selection",
]
