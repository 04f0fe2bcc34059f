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
from typing import TYPE_CHECKING, Any

from flows.config import TrajlakeConfig
from flows.stages.common import StageError, base_model, lake_of
from flows.stages.replay import replay_policy
from flows.stages.score import score_reward

if TYPE_CHECKING:
    import judging
    from training.publish import EvalGate, PublishedAdapter

BASE = "base"
SFT = "sft"
REFERENCES = (BASE, SFT)  # every later stage is also compared with these, paired


def evaluation_reward(config: TrajlakeConfig) -> str:
    """The spec of the success metric: `evaluate.reward`, else `score.reward` when it is one reward
    that is scored, else the first scored reward (each written as a spec or a scored reward's name)."""
    from judging import resolve_reward_key

    rewards = config.score.rewards
    if config.evaluate.reward:
        return resolve_reward_key(config.evaluate.reward, rewards)[0]
    if config.score.reward != "combined":
        spec = resolve_reward_key(config.score.reward, rewards, combined=bool(config.score.weights))[0]
        if spec in rewards:
            return spec
    if not rewards:
        raise StageError("score.rewards", "evaluation needs at least one reward (e.g. `exact_match`)")
    return rewards[0]


def stage_policies(
    sft: str | None, rounds: list[str], start: tuple[str, str] | None = None
) -> list[tuple[str, str | None]]:
    """The labelled policies of one pipeline run, in order: base model, the adapter it continued
    (`start`: its `name:vN` and folder), SFT, each GRPO round."""
    stages: list[tuple[str, str | None]] = [(BASE, None)]
    if start:
        stages.append(start)
    if sft:
        stages.append((SFT, sft))
    stages += [(f"grpo-{i}", adapter) for i, adapter in enumerate(rounds, start=1)]
    return stages


def evaluate_adapter(
    config: TrajlakeConfig, adapter: str, stages: list[tuple[str, str | None]] | None = None
) -> judging.Evaluation:
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

    def measure(path: str | None) -> judging.Measured:
        replayed = replay_policy(
            config, path, config.select.evaluate, run="eval", seed=0, group_size=group_size
        )
        reward = score_reward(config, spec, replayed.group_ids).reward
        greedy = None
        if config.evaluate.greedy:  # one sample per scenario: T=0 has nothing to average
            once = replay_policy(config, path, config.select.evaluate, run="eval", seed=0, greedy=True)
            score_reward(config, spec, once.group_ids)
            greedy = judging.scenario_scores(lake, reward, once.group_ids)
        return judging.Measured(
            replayed.policy, reward, judging.scenario_scores(lake, reward, replayed.group_ids), greedy
        )

    baseline = (f"{name}:v{incumbent['version']}", incumbent["path"]) if incumbent else (BASE, None)
    try:
        evaluation = judging.evaluate_policies(
            lake,
            measure,
            candidate=adapter,
            baseline=baseline,
            stages=stages or (),
            references=(*REFERENCES, baseline[0]) if stages else (),
            production_reward=config.evaluate.production_reward,
            adapter=name,
        )
    except judging.NothingScored as exc:
        raise StageError("select.evaluate", str(exc)) from None
    return evaluation


def gate_of(evaluation: judging.Evaluation, forced: bool) -> EvalGate:
    """The publish gate of an `evaluate_adapter` result."""
    from training.publish import EvalGate

    comparison = evaluation.comparison
    return EvalGate(
        candidate=comparison.candidate.mean,
        incumbent=comparison.baseline.mean,
        incumbent_name=evaluation.baseline,
        difference=comparison.difference,
        difference_ci=comparison.difference_ci,
        scenarios=comparison.paired_scenarios,
        reward=comparison.reward,
        forced=forced,
        table=[row.to_dict() for row in evaluation.table],
        eval_run_id=evaluation.run_id,
    )


def publish_adapter(
    config: TrajlakeConfig,
    adapter: str,
    evaluation: judging.Evaluation,
    force: bool = False,
    origin: dict[str, Any] | None = None,
) -> PublishedAdapter:
    """Publish `adapter` once: `production` and `latest` move to it only when the evaluation says it
    is better (or when forced, or `pipeline.require_improvement` is off); a refused version is
    published under its number alone (`latest` too with `pipeline.latest_if_refused`)."""
    from training.publish import publish
    from training.registry import LATEST, PRODUCTION

    gate = gate_of(evaluation, forced=force or not config.pipeline.require_improvement)
    if gate.promoted:
        aliases: tuple[str, ...] = (LATEST, PRODUCTION)
    else:
        aliases = (LATEST,) if config.pipeline.latest_if_refused else ()
    return publish(
        lake_of(config),
        adapter,
        config.build("publish"),
        aliases=aliases,
        base_model=base_model(config),
        gate=gate,
        origin=origin,
    )


def publication_record(published: PublishedAdapter) -> dict[str, Any]:
    """What the pipeline flow's result says of a published version (JSON-able: Prefect keeps the
    result, the demo and `trajlake pipeline` read it, and its artifact shows it)."""
    gate = published.gate
    return {
        "name": published.name,
        "version": published.version,
        "path": published.path,
        "aliases": published.aliases,
        "promoted": published.promoted,
        "decision": published.decision,
        "gate": {**asdict(gate), "better": gate.better} if gate else None,
        "lineage_json": json.dumps(published.manifest.get("lineage", {}), indent=1, default=str)[:20000],
    }
