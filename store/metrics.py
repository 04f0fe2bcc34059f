"""What a `runs` row's metrics are, per kind of run, declared once: its writers and readers import
the names and the shapes from here, so a renamed metric is one edit and a type checker finds its uses.

A row keeps its numbers in `runs.scalars` (MAP(VARCHAR, DOUBLE)) and its text values in
`runs.tags` (MAP(VARCHAR, VARCHAR)), written from one record by `store.rows.runs_row`. A map
rather than a struct, since TRL logs whatever names its version logs; rather than a long
table, since a step stays one row and one commit, keyed `run_id, step` as before, and a metric
reads as `scalars['loss']` in SQL.

- GRPO steps (stage `grpo`): TRL's logged metrics plus trajlake's comparison of the trainer's
  logprobs of the stored tokens with the sampler's (`SAMPLER_GAP_*`) and, with importance
  sampling correction on, the truncated ratios (`IMPORTANCE_RATIO_*`). Written by
  `training.grpo_trainer`, read by the report (`flows.report.sampling`).
- Evaluation runs (stage `eval`): step 0 the candidate, step 1 the baseline, then one step per
  row of the learning table (`EvaluationTableRow`, role `table`), each paired difference with
  another row as flat `diff_<against>`, `diff_<against>_ci_low`, `diff_<against>_ci_high`
  keys. Written by `judging.evaluation_stats`, read by the report (`flows.report.data`).

Readers in SQL take a metric with `metric_sql`; `row_metrics` gives a row's record back in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# --- GRPO steps ---------------------------------------------------------------------------------

#: Mean |trainer - sampler| logprob of the stored tokens the step's loss counted.
SAMPLER_GAP_MEAN = "sampling/sampling_logp_difference/mean"
#: Largest |trainer - sampler| logprob of those tokens.
SAMPLER_GAP_MAX = "sampling/sampling_logp_difference/max"
#: The truncated importance-sampling ratios pi_old / pi_sampler of the step's tokens.
IMPORTANCE_RATIO_MIN = "sampling/importance_sampling_ratio/min"
IMPORTANCE_RATIO_MEAN = "sampling/importance_sampling_ratio/mean"
IMPORTANCE_RATIO_MAX = "sampling/importance_sampling_ratio/max"

#: The share of row tokens a tree-packed step did not forward (`tree_packing`).
TREE_PACKING_SAVED_SHARE = "tree_packing/saved_token_share"

GRPO_METRICS: tuple[str, ...] = (
    TREE_PACKING_SAVED_SHARE,
    SAMPLER_GAP_MEAN,
    SAMPLER_GAP_MAX,
    IMPORTANCE_RATIO_MIN,
    IMPORTANCE_RATIO_MEAN,
    IMPORTANCE_RATIO_MAX,
)


def metric_sql(name: str, column: str = "scalars") -> str:
    """DuckDB expression: number `name` of a `runs` row (its `scalars` map), NULL where absent.

    >>> metric_sql(SAMPLER_GAP_MEAN, column="r.scalars")
    "r.scalars['sampling/sampling_logp_difference/mean']"
    """
    return f"{column}[{_literal(name)}]"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """A row's record as its two typed columns: (numbers, text). Booleans are text (`true`),
    nulls and nested values are left out (`runs_row` keeps them in `metrics`).

    >>> split_metrics({"loss": 1.5, "n": 3, "role": "table", "ok": True, "grad": None})
    ({'loss': 1.5, 'n': 3.0}, {'role': 'table', 'ok': 'true'})
    """
    scalars: dict[str, float] = {}
    tags: dict[str, str] = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            tags[key] = "true" if value else "false"
        elif isinstance(value, (int, float)):
            scalars[key] = float(value)
        elif isinstance(value, str):
            tags[key] = value
    return scalars, tags


def row_metrics(scalars: Mapping[str, float] | None, tags: Mapping[str, str] | None) -> dict[str, Any]:
    """A row's record from its two typed columns (as Arrow hands a map to Python: a list of pairs,
    or a dict), text first and numbers over it.

    >>> row_metrics([("loss", 1.5)], [("role", "table")])
    {'role': 'table', 'loss': 1.5}
    """
    return {**dict(tags or {}), **dict(scalars or {})}


# --- evaluation runs ----------------------------------------------------------------------------

#: What an evaluation run's step is: the compared pair, then the rows of the learning table.
EvaluationRole = Literal["candidate", "baseline", "table"]
ROLE = "role"
DIFF_PREFIX = "diff_"
_CI_SUFFIXES = ("_ci_low", "_ci_high")


@dataclass(frozen=True)
class EvaluationTableRow:
    """One row of an evaluation's learning table as `runs.metrics` holds it (role `table`)."""

    stage: str
    policy: str
    kind: str  # "val" or "production"
    mean_reward: float
    ci_low: float
    ci_high: float
    n: int
    #: against (another row's stage) -> (mean difference, ci low, ci high)
    differences: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    #: the same stage sampled greedily (T=0, one sample per scenario): (mean, ci low, ci high, n)
    greedy: tuple[float, float, float, int] | None = None

    def to_metrics(self) -> dict[str, Any]:
        """The flat metrics of this row (without the run's context: reward, role)."""
        out: dict[str, Any] = {
            "stage": self.stage,
            "policy": self.policy,
            "kind": self.kind,
            "mean_reward": self.mean_reward,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
        }
        for against, (mean, low, high) in self.differences.items():
            out[f"{DIFF_PREFIX}{against}"] = mean
            out[f"{DIFF_PREFIX}{against}_ci_low"] = low
            out[f"{DIFF_PREFIX}{against}_ci_high"] = high
        if self.greedy is not None:
            out["greedy_mean_reward"], out["greedy_ci_low"], out["greedy_ci_high"], out["greedy_n"] = (
                self.greedy
            )
        return out

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> EvaluationTableRow:
        """The row `to_metrics` wrote (a `runs.metrics` document of role `table`)."""
        against = [
            key[len(DIFF_PREFIX) :]
            for key in metrics
            if key.startswith(DIFF_PREFIX) and not key.endswith(_CI_SUFFIXES)
        ]
        return cls(
            stage=str(metrics["stage"]),
            policy=str(metrics["policy"]),
            kind=str(metrics["kind"]),
            mean_reward=float(metrics["mean_reward"]),
            ci_low=float(metrics["ci_low"]),
            ci_high=float(metrics["ci_high"]),
            n=int(metrics["n"]),
            differences={
                a: (
                    float(metrics[f"{DIFF_PREFIX}{a}"]),
                    float(metrics[f"{DIFF_PREFIX}{a}_ci_low"]),
                    float(metrics[f"{DIFF_PREFIX}{a}_ci_high"]),
                )
                for a in against
            },
            greedy=(
                (
                    float(metrics["greedy_mean_reward"]),
                    float(metrics["greedy_ci_low"]),
                    float(metrics["greedy_ci_high"]),
                    int(metrics["greedy_n"]),
                )
                if metrics.get("greedy_mean_reward") is not None
                else None
            ),
        )


def is_table_row(metrics: Mapping[str, Any]) -> bool:
    """Whether an evaluation run's step is a row of its learning table."""
    role: EvaluationRole = "table"
    return metrics.get(ROLE) == role
