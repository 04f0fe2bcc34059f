"""Replay: scenarios cut from trajectories, replayed with group sampling, token-exactly.

The replay stage owns everything between a chosen trajectory and a stored group of new
ones: scenarios (`scenarios`), sampler backends (`samplers`: transformers, vLLM server,
vLLM engine), the agent loop and tool sources (`rollout`), and the stage itself
(`stage`), which writes each group to `trajectories` with its token ids and logprobs.
It imports nothing from the trainers; GRPO reads what it wrote from the lake. What it
shares with them (chat rendering, model resolution, policy names, adapter files) it imports
from `training.chat` and `training.models`. The samplers and the rollout loop import no
lake library.

Public surface (the CLI and the Prefect flows call these), each name imported from its module
(this package imports nothing, so a GPU machine benchmarking the samplers, which has no lake
library, loads them without the stage):

- `training.replay.stage`: `replay(lake, scenarios_sql, sampler, ReplayConfig(...)) -> ReplayResult`,
  `areplay`, `sampled_groups`
- `training.replay.scenario_io`: `create_scenarios(lake, sql, ScenarioConfig(...))`,
  `load_scenarios(lake, path)`, `read_scenarios(lake, sql)`, `slice_selection(lake, sql, size,
  index)` (a round's share), `shard_selection(sql, shard, shards)` (a task's share)
- `training.replay.scenarios`: `Scenario`, `ScenarioConfig`, `ScenarioResult`
- `training.replay.samplers`: `make_sampler(backend, model, **options)`, `SamplerConfig`,
  `BACKENDS`; `training.replay.samplers.base`: `SamplingParams`
- `training.replay.rollout.tools`: `make_tools(callables, recorded=True)`, `ToolsConfig`;
  `training.replay.rollout.loop`: `RolloutLimits`
- `training.replay.errors`: `ReplayError`, `ReplaySetupError`, `RolloutError`, `SamplerError`,
  `ScenarioError`, `ToolSourceError`
"""
