"""Synthetic trajectories, rewards and scenarios: realistic, columnar, deterministic, any scale.

Tests and benchmarks need lake data that looks like production: multi-turn agent
conversations with tool calls (some of which fail), replayed groups that share a scenario
and a prompt, token ids and logprobs for the replayed ones, and rewards from several
scorers. This module makes such data as Arrow tables in the lake's exact schemas, so it
can go straight into `store.writer.write`:

>>> from store.writer import write
>>> from bench.synthetic import synthetic_trajectories, synthetic_rewards
>>> for batch in synthetic_trajectories(1_000, seed=7):  # doctest: +SKIP
...     write(lake, "trajectories", batch)
>>> write(lake, "rewards", synthetic_rewards(1_000, seed=7))  # doctest: +SKIP

Why it is shaped this way:

- **Counter-based randomness.** Every random choice is a hash of (seed, stream, index),
  never the state of a generator. Trajectory `i` is therefore the same whatever the
  batch size, and `synthetic_trajectories(100)` is a prefix of `synthetic_trajectories(10**6)`.
  `synthetic_rewards(n, seed)` recomputes the same tool failures and groups from the
  indexes alone, so rewards agree with the trajectories without reading them back.
- **Columnar.** Nested columns (`messages`, `turns`) are assembled from flat NumPy
  arrays with list offsets; text comes from small pools with `take`, plus a unique
  suffix on user messages. A million trajectories (about eight million messages) take
  seconds, not minutes.

Layout of trajectory `i`: a system prompt, a user request, `k` rounds of (assistant tool
call, tool result) with `k` uniform in `0..max_tool_rounds`, and a final assistant answer
(`3 + 2k` messages, eight on average with the defaults). Consecutive trajectories form
groups of `group_size`; a group is replayed with probability `replayed_fraction`: its
members share `scenario_id`, `group_id`, `policy`, the user request and the prompt token
ids, and each carries `turns` (one per assistant message; each prompt is the previous
prompt + sampled ids + tool-result ids, as the samplers store them). Other trajectories
are production traces (`otel` or `langfuse`) with empty `turns`.
"""

from bench.synthetic.base import SyntheticConfig, SyntheticConfigError, trajectory_ids
from bench.synthetic.rewards import FORMAT_SCORER, JUDGE_SCORER, TOOL_SCORER, synthetic_rewards
from bench.synthetic.scenarios import synthetic_scenarios
from bench.synthetic.trajectories import synthetic_trajectories

__all__ = [
    "FORMAT_SCORER",
    "JUDGE_SCORER",
    "TOOL_SCORER",
    "SyntheticConfig",
    "SyntheticConfigError",
    "synthetic_rewards",
    "synthetic_scenarios",
    "synthetic_trajectories",
    "trajectory_ids",
]
