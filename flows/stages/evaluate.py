"""Evaluation and publishing: evaluate once (replay the val scenarios with every policy, score,
compare them paired), then publish once with that outcome as the gate.

A pipeline run evaluates each of its stages (base model, SFT, each GRPO round) on the
same val scenarios, so its learning curve is one table with intervals and paired
differences; the production policies join it as reference rows from their own feedback.
The gate itself is one paired comparison: the candidate against the adapter it would
replace in production (or the base model when none is).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from flows.config import TrajlakeConfig
from flows.stages.common import StageError, base_model, lake_of
from flows.stages.replay import replay_policy
from flows.stages.score import score_reward

BASE = "base"
SFT = "sft"
REFERENCES = (BASE, SFT)  # every later stage is also compared with these, paired


def evaluation_reward(config: TrajlakeConfig) -> str:
    """The success metric: `evaluate.reward`, else `score.reward` when it is one reward that is scored,
    else the first scored reward."""
    if config.evaluate.reward:
        return config.evaluate.reward
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


def stage_policies(sft: str | None, rounds: list[str]) -> list[tuple[str, str | None]]:
    """The labelled policies of one pipeline run, in order: base model, SFT, each GRPO round."""
    stages: list[tuple[str, str | None]] = [(BASE, None)]
    if sft:
        stages.append((SFT, sft))
    stages += [(f"grpo-{i}", adapter) for i, adapter in enumerate(rounds, start=1)]
    return stages


def evaluate_adapter(
    config: TrajlakeConfig, adapter: str, stages: list[tuple[str, str | None]] | None = None
) -> dict[str, Any]:
    """Val success of `adapter` against the production adapter (or the base model), paired by scenario;
    with `stages`, every one of them too (the learning curve), each policy replayed once."""
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
    group_size = config.evaluate.group_size or None
    scored: dict[str | None, tuple[str, dict[str, float]]] = {}
    reward_name = spec

    def evaluated(path: str | None) -> tuple[str, dict[str, float]]:
        nonlocal reward_name
        if path not in scored:
            replayed = replay_policy(
                config, path, config.select.evaluate, run="eval", seed=0, group_size=group_size
            )
            reward_name = score_reward(config, spec, replayed["group_ids"])["reward"]
            scenario_scores = judging.scenario_scores(lake, reward_name, replayed["group_ids"])
            scored[path] = (replayed["policy"], scenario_scores)
        return scored[path]

    baseline_label = f"{name}:v{incumbent['version']}" if incumbent else BASE
    labelled = [(label, path) for label, path in stages or []]
    labelled = labelled or [
        (baseline_label, incumbent["path"] if incumbent else None),
        ("candidate", adapter),
    ]
    if incumbent and all(path != incumbent["path"] for _, path in labelled):
        labelled.append((baseline_label, incumbent["path"]))
    for _, path in labelled:
        evaluated(path)
    candidate, baseline = evaluated(adapter), evaluated(incumbent["path"] if incumbent else None)
    if not candidate[1] or not baseline[1]:
        raise StageError(
            "select.evaluate", f"no val scenario was scored with `{reward_name}`; are there val scenarios?"
        )
    comparison = judging.compare(reward_name, candidate, baseline)
    references = REFERENCES if stages else (baseline_label,)
    table = judging.evaluation_table(
        [(label, *scored[path]) for label, path in labelled], references=references
    )
    table += judging.production_success(lake, config.evaluate.production_reward)
    run_id = judging.record_evaluation(lake, comparison, table, adapter=name)
    return {
        "candidate": adapter,
        "baseline": baseline_label,
        "comparison": comparison.to_dict(),
        "table": [row.to_dict() for row in table],
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
        table=evaluation["table"],
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
