"""Evaluation and publishing: evaluate once (replay the val scenarios with both policies, score,
compare them paired), then publish once with that outcome as the gate."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from flows.config import TrajlakeConfig
from flows.stages.common import StageError, base_model, lake_of
from flows.stages.replay import replay_policy
from flows.stages.score import score_reward


def evaluation_reward(config: TrajlakeConfig) -> str:
    """The reward evaluation compares: `score.reward` when it is one reward that is scored, else the first."""
    rewards = config.score.rewards
    if config.score.reward in rewards:
        return config.score.reward
    from judging import get_reward

    for spec in rewards:
        if spec != "ruler" and get_reward(spec).name == config.score.reward:
            return spec
    if not rewards:
        raise StageError("score.rewards", "evaluation needs at least one reward (e.g. `exact_match`)")
    return rewards[0]


def evaluate_adapter(config: TrajlakeConfig, adapter: str) -> dict[str, Any]:
    """Val success of `adapter` against the production adapter (or the base model), paired by scenario."""
    import judging
    from training.errors import AdapterNotFound
    from training.registry import PRODUCTION, resolve_adapter

    if not adapter:
        raise StageError("adapter", "no adapter to evaluate: train one first (`trajlake train sft|grpo`)")
    lake = lake_of(config)
    name = config.build("publish").name
    try:
        incumbent = resolve_adapter(lake, f"{name}:{PRODUCTION}")
    except AdapterNotFound:
        incumbent = None
    spec = evaluation_reward(config)
    scored: list[tuple[str, dict[str, float]]] = []
    reward_name = spec
    for policy in (adapter, incumbent["path"] if incumbent else None):
        replayed = replay_policy(config, policy, config.select.evaluate, run="eval", seed=0)
        reward_name = score_reward(config, spec, replayed["group_ids"])["reward"]
        scored.append((replayed["policy"], judging.scenario_scores(lake, reward_name, replayed["group_ids"])))
    if not scored[0][1] or not scored[1][1]:
        raise StageError(
            "select.evaluate", f"no val scenario was scored with `{reward_name}`; are there val scenarios?"
        )
    comparison = judging.compare(reward_name, scored[0], scored[1])
    run_id = judging.record_evaluation(lake, comparison, adapter=name)
    return {
        "candidate": adapter,
        "baseline": f"{name}:{incumbent['version']}" if incumbent else "base",
        "comparison": comparison.to_dict(),
        "eval_run_id": run_id,
    }


def gate_of(evaluation: dict[str, Any], forced: bool) -> Any:
    """The publish gate (`training.publish.EvalGate`) of an `evaluate_adapter` result."""
    from training.publish import EvalGate

    comparison = evaluation["comparison"]
    return EvalGate(
        candidate=comparison["candidate"]["mean"],
        incumbent=comparison["baseline"]["mean"],
        incumbent_name=evaluation["baseline"],
        difference=comparison["difference"],
        difference_ci=tuple(comparison["difference_ci"]),
        scenarios=comparison["paired_scenarios"],
        reward=comparison["reward"],
        forced=forced,
        table=[
            {"role": "candidate", **comparison["candidate"]},
            {"role": "baseline", **comparison["baseline"]},
        ],
        eval_run_id=evaluation["eval_run_id"],
    )


def publish_adapter(
    config: TrajlakeConfig, adapter: str, evaluation: dict[str, Any], force: bool = False
) -> dict[str, Any]:
    """Publish `adapter` once: `production` moves to it only when the evaluation says it is better
    (or when forced, or `pipeline.require_improvement` is off); `latest` always does."""
    from training.publish import publish

    gate = gate_of(evaluation, forced=force or not config.pipeline.require_improvement)
    aliases = ("latest", "production") if gate.promoted else ("latest",)
    published = publish(
        lake_of(config),
        adapter,
        config.build("publish"),
        aliases=aliases,
        base_model=base_model(config),
        gate=gate,
    )
    return {
        "name": published.name,
        "version": published.version,
        "path": published.path,
        "aliases": published.aliases,
        "promoted": "production" in published.aliases,
        "gate": {**asdict(gate), "better": gate.better},
        "lineage_json": json.dumps(published.manifest.get("lineage", {}), indent=1, default=str)[:20000],
    }
