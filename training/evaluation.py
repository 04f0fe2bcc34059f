"""Evaluation: replay the val scenarios with a policy and score it with a reward callable.

`evaluate` samples groups for the val scenarios with the colleague-owned replay stage
(`training.replay`, any sampler backend), scores every trajectory with a reward function
of judging's signature `(trajectory row, scenario row | None) -> float` that the caller
passes in (training never imports judging; flows wire the two), and records the mean in
the `runs` table (stage `eval`). `replay_evaluator` turns it into the `Evaluator` that
`publish`'s gate calls for the candidate and the incumbent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import store
from training.errors import BadHyperparameter, PublishError
from training.run import runs_row

# Adapter path (None = the base model alone) -> mean reward on the val scenarios.
Evaluator = Callable[[str | None], float]


# A reward callable has judging's signature, `(trajectory row, scenario row | None) -> float`;
# it is passed in (flows wire judging's rewards), so training never imports judging.
RewardCallable = Callable[[dict[str, Any], dict[str, Any] | None], Any]
VAL_SCENARIOS = "SELECT scenario_id FROM scenarios WHERE split = 'val'"


@dataclass
class EvalResult:
    """Mean reward of one policy on the val scenarios, and what it was computed from."""

    policy: str
    mean_reward: float
    trajectories: int
    scenarios: int
    run_id: str
    group_ids: list[str] = field(default_factory=list)


def score_trajectories(
    lake: store.Lake | str, group_ids: Sequence[str], reward_fn: RewardCallable
) -> list[tuple[str, float]]:
    """`(trajectory_id, reward)` for every trajectory of the groups, scored by `reward_fn`."""
    if not group_ids:
        return []
    con = store.connect(lake)
    con.register("__groups", _column_table("group_id", list(group_ids)))
    rows = (
        con.sql(
            """
        SELECT t.* EXCLUDE (_written_at), s.messages AS scenario_messages, s.tools AS scenario_tools,
               s.expected AS scenario_expected, s.split AS scenario_split, s.metadata AS scenario_metadata
        FROM trajectories t JOIN __groups g USING (group_id) LEFT JOIN scenarios s USING (scenario_id)
        ORDER BY t.trajectory_id
        """
        )
        .to_arrow_table()
        .to_pylist()
    )
    scored = []
    for row in rows:
        scenario = {
            "scenario_id": row["scenario_id"],
            "messages": row.pop("scenario_messages"),
            "tools": row.pop("scenario_tools"),
            "expected": row.pop("scenario_expected"),
            "split": row.pop("scenario_split"),
            "metadata": row.pop("scenario_metadata"),
        }
        value = reward_fn(row, scenario if scenario["messages"] is not None else None)
        if isinstance(value, dict) or value is None or not math.isfinite(float(value)):
            raise BadHyperparameter(
                f"the reward function returned `{value!r}` for trajectory `{row['trajectory_id']}`; "
                "evaluation needs one finite number per trajectory",
                name="reward_fn",
                value=value,
            )
        scored.append((row["trajectory_id"], float(value)))
    return scored


def _column_table(name: str, values: list[str]) -> Any:
    import pyarrow as pa

    return pa.table({name: pa.array(values, pa.string())})


def evaluate(
    lake: store.Lake | str,
    base_model: str,
    adapter: str | None,
    reward_fn: RewardCallable,
    *,
    scenarios: str = VAL_SCENARIOS,
    replay_config: Any = None,
    backend: str = "transformers",
    sampler_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> EvalResult:
    """Replay `scenarios` with the policy (base model + `adapter`, or the base model alone) and score it.

    The sampled groups are ordinary replay trajectories in the lake (group ids hash the
    policy, so re-evaluating the same adapter reuses its groups); the mean reward is
    written to the `runs` table (stage `eval`) and returned.
    """
    from training.replay.samplers import make_sampler
    from training.replay.stage import ReplayConfig, replay

    lake = store.Lake.of(lake)
    config = replay_config or ReplayConfig(group_size=4, run="eval", seed=0)
    with make_sampler(backend, base_model, adapter=adapter, **(sampler_options or {})) as sampler:
        result = replay(lake, scenarios, sampler, config, progress=progress)
        policy = sampler.policy
    group_ids = [*result.group_ids, *result.skipped_group_ids]
    if result.failed and not group_ids:
        raise PublishError(f"evaluation of `{policy}` failed on every scenario: {result.failed[0][1]}")
    scored = score_trajectories(lake, group_ids, reward_fn)
    if not scored:
        raise PublishError(
            f"evaluation of `{policy}` produced no trajectories; are there val scenarios? ({scenarios})"
        )
    mean = sum(v for _, v in scored) / len(scored)
    run_id = store.new_run_id("eval")
    metrics = {
        "policy": policy,
        "adapter": adapter,
        "mean_reward": mean,
        "trajectories": len(scored),
        "scenarios": len(group_ids),
        "failed_scenarios": len(result.failed),
        "scenario_sql": scenarios,
    }
    store.write(lake, "runs", [runs_row(run_id, 0, "eval", metrics)])
    return EvalResult(policy, mean, len(scored), len(group_ids), run_id, group_ids)


def replay_evaluator(
    lake: store.Lake | str, base_model: str, reward_fn: RewardCallable, **options: Any
) -> Evaluator:
    """An `Evaluator` for `publish`'s gate: adapter path (None = base) -> mean val reward via `evaluate`."""

    def run(adapter: str | None) -> float:
        return evaluate(lake, base_model, adapter, reward_fn, **options).mean_reward

    return run
