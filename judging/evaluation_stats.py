"""Evaluation summaries: policies compared on the same scenarios, with confidence intervals.

Evaluating a policy is replaying the val scenarios with it and scoring what it did; this
module is the last step, the statistics. A policy's score on a scenario is the mean
reward of its trajectories there (a group of G samples), so every policy is measured on
the same unit. From those:

- each policy's mean over scenarios, with a percentile bootstrap confidence interval
  (scenarios resampled with replacement);
- the paired comparison of two policies: the mean of per-scenario differences over the
  scenarios both were scored on, with its own bootstrap interval. Pairing removes the
  between-scenario variance (easy and hard questions), so it detects a real gain with
  far fewer scenarios than comparing two means would.

The pure functions take `{scenario_id: value}` mappings; `scenario_scores` reads them
from the lake (`latest_rewards` joined with `trajectories`).

A run's learning curve is an `evaluation_table`: every stage (base model, SFT, each GRPO
round) on the same val scenarios, each with its interval and paired differences with
the previous stage and with named references (the base model, the SFT warm start).
Production policies join it as reference rows from their own traffic
(`production_success`): the share of their trajectories production feedback rated a
success, bootstrapped over trajectories. Those rows are not paired with the val rows
(production ran on its own questions, and val scenarios are cut from trajectories that
passed a selection), so they are a reference line, not a comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from store.catalog.connection import connect
from store.lake import Lake
from store.metrics import ROLE, EvaluationRole, EvaluationTableRow
from store.rows import new_run_id, runs_row
from store.vocabulary import PRODUCTION_SOURCES
from store.writer import write

CONFIDENCE = 0.95
RESAMPLES = 4000


@dataclass(frozen=True)
class PolicyScore:
    """One policy's success on a set of scenarios."""

    policy: str
    mean: float
    ci: tuple[float, float]
    scenarios: int


@dataclass(frozen=True)
class Comparison:
    """A candidate against a baseline on the scenarios both were scored on."""

    reward: str
    candidate: PolicyScore
    baseline: PolicyScore
    difference: float  # mean over paired scenarios of candidate - baseline
    difference_ci: tuple[float, float]
    paired_scenarios: int

    @property
    def better(self) -> bool:
        """Whether the whole confidence interval of the paired difference is above zero."""
        return self.difference_ci[0] > 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def bootstrap_ci(
    values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (a point interval for fewer than 2).

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return (float("nan"), float("nan"))
    if data.size == 1:
        return (float(data[0]), float(data[0]))
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return (float(low), float(high))


def policy_score(policy: str, scores: Mapping[str, float], **bootstrap: int | float) -> PolicyScore:
    """Mean and interval of one policy's per-scenario scores (in scenario order: the interval does not
    depend on the order the scores were read in)."""
    values = [scores[scenario] for scenario in sorted(scores)]
    mean = float(np.mean(values)) if values else float("nan")
    return PolicyScore(policy, mean, bootstrap_ci(values, **bootstrap), len(values))  # type: ignore[arg-type]


def compare(
    reward: str,
    candidate: tuple[str, Mapping[str, float]],
    baseline: tuple[str, Mapping[str, float]],
    **bootstrap: int | float,
) -> Comparison:
    """Paired comparison of two policies' per-scenario scores (`(name, {scenario_id: score})` each)."""
    shared = sorted(set(candidate[1]) & set(baseline[1]))
    differences = [candidate[1][s] - baseline[1][s] for s in shared]
    return Comparison(
        reward=reward,
        candidate=policy_score(candidate[0], candidate[1], **bootstrap),
        baseline=policy_score(baseline[0], baseline[1], **bootstrap),
        difference=float(np.mean(differences)) if differences else float("nan"),
        difference_ci=bootstrap_ci(differences, **bootstrap),  # type: ignore[arg-type]
        paired_scenarios=len(shared),
    )


def independent_difference(
    after: Sequence[float], before: Sequence[float], **bootstrap: int | float
) -> tuple[float, tuple[float, float]]:
    """mean(after) - mean(before) of two independent samples (two batches of production traffic:
    different questions, so nothing to pair), with a bootstrap interval resampling each sample.

    >>> independent_difference([1.0, 1.0], [0.0, 0.0])
    (1.0, (1.0, 1.0))
    """
    a, b = np.asarray(after, dtype=np.float64), np.asarray(before, dtype=np.float64)
    if not a.size or not b.size:
        return float("nan"), (float("nan"), float("nan"))
    rng = np.random.default_rng(int(bootstrap.get("seed", 0)))
    resamples = int(bootstrap.get("resamples", RESAMPLES))
    means = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1) - b[
        rng.integers(0, b.size, size=(resamples, b.size))
    ].mean(axis=1)
    tail = (1 - float(bootstrap.get("confidence", CONFIDENCE))) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(a.mean() - b.mean()), (float(low), float(high))


@dataclass(frozen=True)
class Difference:
    """A paired difference (this row minus another) over the scenarios both were scored on."""

    against: str
    mean: float
    ci: tuple[float, float]
    paired_scenarios: int


@dataclass(frozen=True)
class StageScore:
    """One row of an evaluation table: a stage's success on the val scenarios, or a production
    policy's on its own traffic (`kind = "production"`, `n` = trajectories)."""

    stage: str
    policy: str
    kind: Literal["val", "production"]
    mean: float
    ci: tuple[float, float]
    n: int
    differences: list[Difference] = field(default_factory=list)
    # The same policy sampled greedily (T=0, one sample per scenario), when it was measured so.
    greedy: PolicyScore | None = None

    def difference(self, against: str) -> Difference | None:
        return next((d for d in self.differences if d.against == against), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_difference(
    against: str, scores: Mapping[str, float], other: Mapping[str, float], **bootstrap: int | float
) -> Difference:
    """mean(scores - other) over the shared scenarios, with its bootstrap interval."""
    shared = sorted(set(scores) & set(other))
    values = [scores[s] - other[s] for s in shared]
    mean = float(np.mean(values)) if values else float("nan")
    return Difference(against, mean, bootstrap_ci(values, **bootstrap), len(shared))  # type: ignore[arg-type]


def evaluation_table(
    stages: Sequence[tuple[str, str, Mapping[str, float]]],
    *,
    references: Sequence[str] = (),
    greedy: Mapping[str, Mapping[str, float]] | None = None,
    **bootstrap: int | float,
) -> list[StageScore]:
    """Rows for `(stage, policy, {scenario_id: score})` in order, each paired with the previous
    stage (`against="previous"`) and with every earlier stage named in `references`; `greedy`:
    per stage, its greedy (T=0) scores, summarised beside the sampled ones.

    >>> rows = evaluation_table([("base", "m", {"a": 0.0, "b": 0.0}), ("sft", "m+a", {"a": 1.0, "b": 0.5})])
    >>> rows[1].mean, rows[1].difference("previous").mean
    (0.75, 0.75)
    """
    rows: list[StageScore] = []
    for i, (stage, policy, scores) in enumerate(stages):
        differences = []
        if i:
            differences.append(paired_difference("previous", scores, stages[i - 1][2], **bootstrap))
        for earlier, _, other in stages[:i]:
            if earlier in references:
                differences.append(paired_difference(earlier, scores, other, **bootstrap))
        score = policy_score(policy, scores, **bootstrap)
        greedy_scores = (greedy or {}).get(stage)
        rows.append(
            StageScore(
                stage,
                policy,
                "val",
                score.mean,
                score.ci,
                score.scenarios,
                differences,
                policy_score(policy, greedy_scores, **bootstrap) if greedy_scores else None,
            )
        )
    return rows


# --- the lake ----------------------------------------------------------------------------------------


def production_success(
    lake: Lake | str,
    reward: str,
    *,
    sources: Sequence[str] = PRODUCTION_SOURCES,
    **bootstrap: int | float,
) -> list[StageScore]:
    """Per production policy (the `policy` of its trajectories), the mean of `reward` over its
    trajectories with a bootstrap interval over them, in the order they first served."""
    with connect(lake, read_only=True) as con:
        rows = con.execute(
            """
            SELECT t.policy, list(r.value ORDER BY t.trajectory_id)
            FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
            WHERE r.name = $reward AND list_contains($sources, t.source) AND t.policy IS NOT NULL
            GROUP BY t.policy ORDER BY min(t.started_at), count(*) DESC, t.policy
            """,
            {"reward": reward, "sources": list(sources)},
        ).fetchall()
    out = []
    for policy, values in rows:
        data = [float(v) for v in values]
        ci = bootstrap_ci(data, **bootstrap)  # type: ignore[arg-type]
        out.append(StageScore("production", policy, "production", float(np.mean(data)), ci, len(data)))
    return out


def scenario_scores(lake: Lake | str, reward: str, group_ids: Sequence[str]) -> dict[str, float]:
    """`{scenario_id: mean reward}` of the trajectories of `group_ids` (scored under `reward`)."""
    if not group_ids:
        return {}
    with connect(lake, read_only=True) as con:
        con.register("__groups", pa.table({"group_id": pa.array(list(group_ids), pa.string())}))
        rows = con.execute(
            """
            SELECT t.scenario_id, avg(r.value)
            FROM trajectories t JOIN __groups USING (group_id)
                 JOIN latest_rewards r USING (trajectory_id)
            WHERE r.name = ? AND t.scenario_id IS NOT NULL
            GROUP BY t.scenario_id
            """,
            [reward],
        ).fetchall()
    return {scenario: float(value) for scenario, value in rows}


def record_evaluation(
    lake: Lake | str,
    comparison: Comparison,
    table: Sequence[StageScore] = (),
    **context: str,
) -> str:
    """Write the comparison to the `runs` table (stage `eval`: candidate and baseline at steps 0
    and 1, then one step per row of `table`); returns the run id."""
    run_id = new_run_id("eval")
    rows = []
    compared: tuple[tuple[EvaluationRole, PolicyScore], ...] = (
        ("candidate", comparison.candidate),
        ("baseline", comparison.baseline),
    )
    for step, (role, score) in enumerate(compared):
        metrics = {
            **context,
            ROLE: role,
            "policy": score.policy,
            "reward": comparison.reward,
            "mean_reward": score.mean,
            "ci_low": score.ci[0],
            "ci_high": score.ci[1],
            "scenarios": score.scenarios,
            "difference": comparison.difference,
            "difference_ci": list(comparison.difference_ci),
        }
        rows.append(runs_row(run_id, step, "eval", metrics))
    for step, row in enumerate(table, start=2):
        metrics = {**context, ROLE: "table", "reward": comparison.reward, **table_metrics(row)}
        rows.append(runs_row(run_id, step, "eval", metrics))
    write(lake, "runs", rows)
    return run_id


def table_metrics(row: StageScore) -> dict[str, Any]:
    """A table row as flat `runs` metrics, in the shape `store.metrics.EvaluationTableRow` declares."""
    return EvaluationTableRow(
        stage=row.stage,
        policy=row.policy,
        kind=row.kind,
        mean_reward=row.mean,
        ci_low=row.ci[0],
        ci_high=row.ci[1],
        n=row.n,
        differences={d.against: (d.mean, d.ci[0], d.ci[1]) for d in row.differences},
        greedy=(row.greedy.mean, row.greedy.ci[0], row.greedy.ci[1], row.greedy.scenarios)
        if row.greedy
        else None,
    ).to_metrics()
