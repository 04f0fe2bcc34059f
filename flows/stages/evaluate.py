"""Evaluation and publishing: evaluate once (replay the val scenarios with every policy, score,
compare them paired), then publish once with that outcome as the gate.

A pipeline run evaluates each of its stages (base model, SFT, each GRPO round) on the
same val scenarios, so its learning curve is one table with intervals and paired
differences; the production policies join it as reference rows from their own feedback.
The gate itself is one paired comparison: the candidate against the adapter it would
replace in production (or the base model when none is).

A candidate the gate refuses is not published (unless `pipeline.latest_if_refused` asks
for it as `latest`), as `trajlake publish --production` publishes nothing when its gate
refuses: a registry version is something to serve, and versions nobody may serve piled up
night after night, moving "the newest version" away from what production runs. The
candidate's folder stays in the run's work folder and its decision in `runs`, so it can
still be published by hand.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.config.sections import EvaluateSettings, PipelineSettings, ScoreSettings, Selections
from flows.stages.common import StageError, base_model
from flows.stages.replay import ReplaySections, evaluation_replays
from flows.stages.score import score_reward
from judging.config import JudgeConfig
from store import pipeline_runs
from store.lake import Lake
from store.pipeline_runs import GateDecision
from store.rows import utc_now
from training.errors import AdapterNotFound
from training.publish import EvalGate, PublishConfig
from training.publish import publish as publish_version  # the stage takes `publish=`, its section
from training.registry import LATEST, PRODUCTION, resolve_adapter
from training.replay.samplers import SamplerConfig

if TYPE_CHECKING:
    from judging.evaluate import Evaluation, Measured
    from training.publish import PublishedAdapter

BASE = "base"
SFT = "sft"
REFERENCES = (BASE, SFT)  # every later stage is also compared with these, paired


def evaluation_reward(*, score: ScoreSettings, evaluate: EvaluateSettings) -> str:
    """The spec of the success metric: `evaluate.reward`, else `score.reward` when it is one reward
    that is scored, else the first scored reward (each written as a spec or a scored reward's name)."""
    from judging.errors import RewardSpecError
    from judging.registry import resolve_reward_key

    rewards = score.rewards
    if evaluate.reward:
        try:
            return resolve_reward_key(evaluate.reward, rewards)[0]
        except RewardSpecError as exc:
            raise StageError("evaluate.reward", str(exc)) from None
    if score.reward != "combined":
        try:
            spec = resolve_reward_key(score.reward, rewards, combined=bool(score.weights))[0]
        except RewardSpecError as exc:
            raise StageError("score.reward", str(exc)) from None
        if spec in rewards:
            return spec
    if not rewards:
        raise StageError("score.rewards", "evaluation needs at least one reward (e.g. `exact_match`)")
    return rewards[0]


def stage_policies(
    sft: str | None,
    rounds: list[str],
    start: tuple[str, str] | None = None,
    *,
    intermediate: bool = True,
) -> list[tuple[str, str | None]]:
    """The labelled policies of one pipeline run, in order: base model, the adapter it continued
    (`start`: its `name:vN` and folder), SFT, each GRPO round (`grpo-N`, N its round).

    Without `intermediate`, only the ends: where the run started (the adapter it continued, else
    the base model), SFT, and the last round, the candidate. Each policy measured costs as much
    as the candidate, and a run that continues an adapter already knows the base model's score
    from the run that trained it."""
    stages: list[tuple[str, str | None]] = [] if start and not intermediate else [(BASE, None)]
    if start:
        stages.append(start)
    if sft:
        stages.append((SFT, sft))
    numbered = [(f"grpo-{i}", adapter) for i, adapter in enumerate(rounds, start=1)]
    stages += numbered if intermediate else numbered[-1:]
    return stages


def evaluate_adapter(
    lake: Lake,
    adapter: str,
    stages: list[tuple[str, str | None]] | None = None,
    *,
    publish: PublishConfig,
    evaluate: EvaluateSettings,
    select: Selections,
    score: ScoreSettings,
    judge: JudgeConfig,
    replaying: ReplaySections,
) -> Evaluation:
    """Val success of `adapter` against the production adapter under `publish.name` (or the base
    model), paired by scenario; with `stages`, every one of them too (the learning curve), each policy
    replayed once (`measurer`)."""
    from judging.evaluate import NothingScored, evaluate_policies

    if not adapter:
        raise StageError("adapter", "no adapter to evaluate: train one first (`trajlake train sft|grpo`)")
    name = publish.name
    try:
        incumbent = resolve_adapter(lake, f"{name}:{PRODUCTION}")
    except AdapterNotFound:
        incumbent = None
    measure = measurer(lake, evaluate=evaluate, select=select, score=score, judge=judge, replaying=replaying)
    baseline = (f"{name}:v{incumbent['version']}", incumbent["path"]) if incumbent else (BASE, None)
    try:
        evaluation = evaluate_policies(
            lake,
            measure,
            candidate=adapter,
            baseline=baseline,
            stages=stages or (),
            references=(*REFERENCES, baseline[0]) if stages else (),
            production_reward=evaluate.production_reward,
            adapter=name,
        )
    except NothingScored as exc:
        raise StageError("select.evaluate", str(exc)) from None
    return evaluation


def measurer(
    lake: Lake,
    *,
    evaluate: EvaluateSettings,
    select: Selections,
    score: ScoreSettings,
    judge: JudgeConfig,
    replaying: ReplaySections,
) -> Callable[[str | None], Measured]:
    """`measure(adapter folder | None) -> Measured`: replay `select.evaluate` with the policy
    (`evaluate.group_size` samples each at `evaluate.temperature`, and once greedily with
    `evaluate.greedy`, both in the same batches), score it with the evaluation reward, and
    read its per-scenario success (`evaluate_policies`' input)."""
    from judging.evaluate import Measured
    from judging.evaluation_stats import scenario_scores

    spec = evaluation_reward(score=score, evaluate=evaluate)
    group_size = evaluate.group_size or None
    temperature = evaluate.temperature or None

    def measure(path: str | None) -> Measured:
        replayed, once = evaluation_replays(
            lake,
            path,
            select.evaluate,
            run="eval",
            seed=0,
            group_size=group_size,
            temperature=temperature,
            greedy=evaluate.greedy,  # one sample per scenario: T=0 has nothing to average
            replaying=replaying,
        )
        reward = score_reward(lake, spec, replayed.group_ids, judge=judge).reward
        greedy = None
        if once is not None:
            score_reward(lake, spec, once.group_ids, judge=judge)
            greedy = scenario_scores(lake, reward, once.group_ids)
        return Measured(replayed.policy, reward, scenario_scores(lake, reward, replayed.group_ids), greedy)

    return measure


def policy_of(lake: Lake, ref: str) -> tuple[str, str | None]:
    """A policy named on the command line as (label, adapter folder | None): `base` (the base model),
    an adapter folder, or a published adapter `name`, `name:alias` or `name:vN` (its label
    `name:vN`). An unknown one is a `StageError` listing what the registry holds."""
    if ref == BASE:
        return BASE, None
    if Path(ref).is_dir():
        return ref, ref
    name, _, which = ref.partition(":")
    if which[:1] == "v" and which[1:].isdigit():
        which = which[1:]
    try:
        row = resolve_adapter(lake, f"{name}:{which}" if which else name)
    except AdapterNotFound as exc:
        raise StageError(
            "policy", f"`{ref}` is not `base`, an adapter folder or a published adapter: {exc}"
        ) from None
    return f"{row['name']}:v{row['version']}", str(row["path"])


def default_policies(lake: Lake, publish: PublishConfig) -> list[str]:
    """What `trajlake evaluate` compares when no policy is named: the base model, and the adapter
    holding `production` under `publish.name` when one does."""
    name = publish.name
    try:
        resolve_adapter(lake, f"{name}:{PRODUCTION}")
    except AdapterNotFound:
        return [BASE]
    return [BASE, f"{name}:{PRODUCTION}"]


def compare_policies(
    lake: Lake,
    policies: list[str],
    *,
    production: bool = True,
    evaluate: EvaluateSettings,
    select: Selections,
    score: ScoreSettings,
    judge: JudgeConfig,
    replaying: ReplaySections,
) -> Evaluation:
    """Measure each policy once on `select.evaluate` and pair every one with each before it, by
    scenario (`evaluate_policies`); with `production`, the production policies' success
    on their own traffic (`evaluate.production_reward`) joins as reference rows. Recorded as one
    `eval` run in `runs`; nothing is published and no alias moves."""
    from judging.errors import RewardSpecError
    from judging.evaluate import NothingScored, evaluate_policies
    from judging.registry import get_reward

    labelled = [policy_of(lake, ref) for ref in dict.fromkeys(policies)]
    if not labelled:
        raise StageError("policy", "name at least one policy: `base`, an adapter folder or `name:alias`")
    spec = evaluation_reward(score=score, evaluate=evaluate)
    if spec != "ruler":  # resolved before any replay: a bad spec fails now, not after minutes of sampling
        try:
            get_reward(spec)
        except RewardSpecError as exc:
            raise StageError("evaluate.reward", str(exc)) from None
    try:
        return evaluate_policies(
            lake,
            measurer(lake, evaluate=evaluate, select=select, score=score, judge=judge, replaying=replaying),
            candidate=labelled[-1][1],
            baseline=labelled[0],
            stages=labelled,
            references=[label for label, _ in labelled],
            production_reward=evaluate.production_reward if production else None,
            command="trajlake evaluate",
        )
    except NothingScored as exc:
        raise StageError("select.evaluate", str(exc)) from None


def gate_of(evaluation: Evaluation, forced: bool) -> EvalGate:
    """The publish gate of an `evaluate_adapter` result."""
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


@dataclass
class Publication:
    """What the gate decided about a candidate, and the version published (None: nothing was)."""

    gate: EvalGate
    decision: str  # the gate's decision in one line, with its numbers
    published: PublishedAdapter | None = None

    @property
    def ref(self) -> str | None:
        """`name:vN` of the published version, if one was."""
        return f"{self.published.name}:v{self.published.version}" if self.published else None


def refused_decision(name: str, gate: EvalGate, adapter: str) -> str:
    """The decision about a refused candidate that was not published, and how to publish it anyway.

    >>> from training.publish import EvalGate
    >>> refused_decision("agent", EvalGate(0.5, 0.6, "agent:v1", -0.1, (-0.2, 0.0), 12, "r"), "/w/a")
    'agent candidate not promoted: -0.100 [-0.200, +0.000] against agent:v1 on 12 scenarios (r); not published (its folder: /w/a)'
    """
    return gate.decision(f"{name} candidate") + f"; not published (its folder: {adapter})"


def publish_adapter(
    lake: Lake,
    adapter: str,
    evaluation: Evaluation,
    force: bool = False,
    origin: dict[str, Any] | None = None,
    *,
    pipeline: PipelineSettings,
    publish: PublishConfig,
    sampler: SamplerConfig,
) -> Publication:
    """Publish `adapter` when the evaluation says it is better (or when forced, or
    `pipeline.require_improvement` is off), moving `production` and `latest` to it; a refused
    candidate is not published, unless `pipeline.latest_if_refused` publishes it as `latest`."""
    gate = gate_of(evaluation, forced=force or not pipeline.require_improvement)
    if gate.promoted:
        aliases: tuple[str, ...] = (LATEST, PRODUCTION)
    elif pipeline.latest_if_refused:
        aliases = (LATEST,)
    else:
        return Publication(gate, refused_decision(publish.name, gate, adapter))
    published = publish_version(
        lake,
        adapter,
        publish,
        aliases=aliases,
        base_model=base_model(sampler),
        gate=gate,
        origin=origin,
    )
    return Publication(gate, published.decision or "", published)


def record_publish_decision(
    lake: Lake, candidate: str, gate: EvalGate, published: PublishedAdapter | None, name: str
) -> GateDecision:
    """Record the decision of a gate run outside a pipeline run (`trajlake publish`) in `runs`, where
    the report's pipeline runs show it beside the nights'."""
    ref = f"{published.name}:v{published.version}" if published else None
    decision = GateDecision(
        run_id=f"publish-{uuid.uuid4()}",
        at=utc_now().isoformat(),
        candidate=candidate,
        decision=gate.decision(ref) if ref else gate.decision(f"{name} candidate") + "; nothing published",
        promoted=bool(published and published.promoted),
        published=ref,
        eval_run_id=gate.eval_run_id,
    )
    pipeline_runs.record_gate_decision(lake, decision)
    return decision


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
