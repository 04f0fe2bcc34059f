"""The report's sampler/trainer section: per GRPO round, how far the trainer's logprobs of the
stored tokens were from the sampler's, and the importance-sampling correction applied.

Read from the `runs` rows GRPO writes (`sampling/sampling_logp_difference/*` every step;
`sampling/importance_sampling_ratio/*` when `vllm_importance_sampling_correction` is on).
A round's first step shows the mismatch alone (no update yet); later steps add the
optimiser's drift since sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.metrics import (
    IMPORTANCE_RATIO_MEAN,
    IMPORTANCE_RATIO_MIN,
    SAMPLER_GAP_MAX,
    SAMPLER_GAP_MEAN,
    metric_sql,
)
from store.vocabulary import equals

GRPO_RUNS = equals("stage", "grpo", table="runs")


@dataclass
class SamplerGapRow:
    """One GRPO round (training run) of the sampler/trainer comparison."""

    round: int
    run_id: str
    steps: int
    first_step_gap: float | None  # mean |trainer - sampler| logprob at the round's first step
    first_step_max_gap: float | None
    mean_gap: float | None  # over the round's steps
    correction: bool  # truncated importance sampling was applied
    ratio_mean: float | None
    ratio_min: float | None


def sampler_gap_rows(con: Any) -> list[SamplerGapRow]:
    """Every GRPO run in `runs`, oldest first."""
    gap, gap_max = metric_sql(SAMPLER_GAP_MEAN), metric_sql(SAMPLER_GAP_MAX)
    found = con.execute(
        f"""
        SELECT run_id, count(*) AS steps,
               arg_min({gap}, step), arg_min({gap_max}, step),
               avg({gap}),
               avg({metric_sql(IMPORTANCE_RATIO_MEAN)}), min({metric_sql(IMPORTANCE_RATIO_MIN)})
        FROM runs WHERE {GRPO_RUNS} GROUP BY run_id ORDER BY min("at"), run_id
        """
    ).fetchall()
    return [
        SamplerGapRow(i + 1, run_id, int(steps), first, first_max, mean, ratio is not None, ratio, ratio_min)
        for i, (run_id, steps, first, first_max, mean, ratio, ratio_min) in enumerate(found)
    ]


def gap_steps(con: Any) -> list[tuple[int, int, float]]:
    """(round, step, mean gap) of every GRPO step that logged the gap, rounds oldest first."""
    found = con.execute(
        f"""
        SELECT dense_rank() OVER (ORDER BY first_at, run_id) AS round, step, gap FROM (
            SELECT run_id, step, min("at") OVER (PARTITION BY run_id) AS first_at,
                   {metric_sql(SAMPLER_GAP_MEAN)} AS gap
            FROM runs WHERE {GRPO_RUNS}
        ) WHERE gap IS NOT NULL ORDER BY round, step
        """
    ).fetchall()
    return [(int(r), int(step), float(gap)) for r, step, gap in found]


def sampler_gap_table(rows: list[SamplerGapRow]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of the report's table."""
    headers = [
        "round",
        "run",
        "steps",
        "gap at first step (mean)",
        "gap at first step (max)",
        "gap over the round (mean)",
        "importance-sampling correction",
        "weight mean / min",
    ]
    body = [
        [
            r.round,
            r.run_id,
            r.steps,
            _small(r.first_step_gap),
            _small(r.first_step_max_gap),
            _small(r.mean_gap),
            "on (truncated, per token)" if r.correction else "off",
            f"{r.ratio_mean:.4f} / {r.ratio_min:.4f}"
            if r.ratio_mean is not None and r.ratio_min is not None
            else "",
        ]
        for r in rows
    ]
    return headers, body


def _small(value: float | None) -> str:
    return "" if value is None else f"{value:.2e}"
