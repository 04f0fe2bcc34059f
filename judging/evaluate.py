"""The evaluation procedure: measure each policy once on the val scenarios, compare the candidate
with the baseline paired by scenario, lay out the learning-curve table, record it in `runs`.

Measuring a policy (replaying the val scenarios with it and scoring what it did) needs a
sampler and the scoring stage, which this package does not own: the caller passes it in as
`measure(path) -> Measured`. Everything else, which policies are measured, in which order
they appear, what each is compared with, is decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from judging.errors import JudgingError
from judging.evaluation_stats import (
    Comparison,
    StageScore,
    compare,
    evaluation_table,
    production_success,
    record_evaluation,
)
from store.lake import Lake

#: A policy to measure: its label in the table and its adapter folder (None: the base model).
Labelled = tuple[str, str | None]


class Measured(NamedTuple):
    """One policy measured on the val scenarios."""

    policy: str  # the lake's name of the policy (`trajectories.policy`)
    reward: str  # the reward name its trajectories were scored under
    scores: Mapping[str, float]  # {scenario_id: mean reward}
    greedy: Mapping[str, float] | None = None  # {scenario_id: reward} of one greedy (T=0) sample


class NothingScored(JudgingError, ValueError):
    """The candidate or the baseline has no scored val scenario, so there is nothing to compare."""


@dataclass(frozen=True)
class Evaluation:
    """What an evaluation found: the paired comparison, the table, and the `runs` id it was recorded as."""

    candidate: str | None  # adapter folder (None: the base model)
    baseline: str  # the baseline's label
    comparison: Comparison
    table: list[StageScore]
    run_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "baseline": self.baseline,
            "comparison": self.comparison.to_dict(),
            "table": [row.to_dict() for row in self.table],
            "eval_run_id": self.run_id,
        }


def evaluate_policies(
    lake: Lake | str,
    measure: Callable[[str | None], Measured],
    *,
    candidate: str | None,
    baseline: Labelled,
    stages: Sequence[Labelled] = (),
    references: Sequence[str] = (),
    production_reward: str | None = None,
    **context: str,
) -> Evaluation:
    """Measure every policy once and compare `candidate` with `baseline`, paired by scenario.

    The table holds `stages` in order (a pipeline's learning curve: each paired with the
    previous one and with the `references` among the earlier ones), else the baseline then
    the candidate; the baseline joins a table that lacks it. Production policies follow as
    reference rows from their own feedback (`production_reward`). The comparison and the
    table are recorded as one `eval` run in `runs` (`context` goes into its metrics).
    """
    measured: dict[str | None, Measured] = {}

    def measured_once(path: str | None) -> Measured:
        if path not in measured:
            measured[path] = measure(path)
        return measured[path]

    labelled = list(stages) or [baseline, ("candidate", candidate)]
    if all(path != baseline[1] for _, path in labelled):
        labelled.append(baseline)
    for _, path in labelled:
        measured_once(path)
    ours, theirs = measured_once(candidate), measured_once(baseline[1])
    if not ours.scores or not theirs.scores:
        raise NothingScored(f"no val scenario was scored with `{ours.reward}`; are there val scenarios?")
    comparison = compare(ours.reward, (ours.policy, ours.scores), (theirs.policy, theirs.scores))
    rows = [(label, measured[path].policy, measured[path].scores) for label, path in labelled]
    greedy = {label: g for label, path in labelled if (g := measured[path].greedy)}
    table = evaluation_table(rows, references=references or (baseline[0],), greedy=greedy)
    if production_reward:
        table += production_success(lake, production_reward)
    run_id = record_evaluation(lake, comparison, table, **context)
    return Evaluation(candidate, baseline[0], comparison, table, run_id)
