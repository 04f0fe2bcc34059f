"""The combined reward: named rewards weighted into the one reward training uses.

    combined = sum_i w_i * r_i                       (normalize=False)
    combined = sum_i w_i * r_i / sum_i |w_i|         (normalize=True, the default)

With the default normalisation, rewards in [0, 1] combine into [0, 1] and penalties
in [-1, 0] (`turn_penalty`, `length_penalty`) pull it down, so
`{"ruler": 0.7, "exact_match": 0.3, "turn_penalty": 0.1}` reads as shares. Each
component is the trajectory's newest successful value of that name (`latest_rewards`),
whichever scorer produced it; the row's `metadata` records the scorers and values used.

A trajectory with some components but not all gets a failed row (`missing_component`,
or `component_failed` when the component's scoring failed): a combined reward computed
from part of its inputs would be a different reward, and a silent zero would teach the
wrong thing. Trajectories with none of the components get no row. Re-running rewrites
only rows whose value or inputs changed, so it is cheap and idempotent.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from judging.errors import ConfigValueError
from judging.select import candidates_sql, run_checked, where_clause
from judging.writer import reward_row
from store.catalog.connection import connect
from store.lake import Lake
from store.rows import new_run_id, utc_now
from store.vocabulary import equals
from store.writer import write


@dataclass
class CombineSummary:
    """What `combine` wrote."""

    name: str
    scorer: str
    run_id: str
    combined: int = 0
    unchanged: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    mean: float | None = None


def combined_scorer(weights: dict[str, float], normalize: bool) -> str:
    """`combine:<name>=<weight>,...[:norm]`: weights are part of the identity of the reward."""
    parts = ",".join(f"{name}={weights[name]:g}" for name in sorted(weights))
    return f"combine:{parts}" + (":norm" if normalize else "")


def combine_values(values: dict[str, float], weights: dict[str, float], normalize: bool = True) -> float:
    """The combined value of one trajectory's components (all must be present).

    >>> combine_values({"ruler": 0.8, "exact_match": 1.0}, {"ruler": 0.75, "exact_match": 0.25})
    0.85
    """
    total = sum(weights[n] * values[n] for n in weights)
    if normalize:
        total /= sum(abs(w) for w in weights.values())
    return round(total, 12)


def _check_weights(weights: dict[str, float]) -> None:
    if not weights:
        raise ConfigValueError(
            "`weights` must hold at least one `name: weight` pair", field="weights", value=weights
        )
    for name, weight in weights.items():
        if not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ConfigValueError(
                f"`weights.{name}` must be a finite number, got {weight!r}",
                field=f"weights.{name}",
                value=weight,
            )
    if sum(abs(w) for w in weights.values()) == 0:
        raise ConfigValueError("`weights` must not all be zero", field="weights", value=weights)


def combine(
    lake: Lake | str | os.PathLike[str],
    weights: dict[str, float],
    name: str = "combined",
    *,
    where: str | None = None,
    normalize: bool = True,
    run_id: str | None = None,
) -> CombineSummary:
    """Write the weighted combination of named rewards as reward `name` (see the module docstring)."""
    _check_weights(weights)
    lake = Lake.of(lake)
    scorer = combined_scorer(weights, normalize)
    run_id = run_id or new_run_id("score")
    con = connect(lake)
    names = sorted(weights)
    sql = f"""
        WITH candidates AS ({candidates_sql()}),
             picked AS (SELECT trajectory_id, group_id FROM candidates {where_clause(where)}),
             ok AS (SELECT trajectory_id, name, value, scorer FROM latest_rewards WHERE name IN (SELECT unnest($names))),
             bad AS (SELECT DISTINCT trajectory_id, name FROM rewards
                     WHERE name IN (SELECT unnest($names)) AND {equals("status", "failed", table="rewards")})
        SELECT p.trajectory_id, p.group_id,
               list({{'name': ok.name, 'value': ok.value, 'scorer': ok.scorer}}) FILTER (WHERE ok.name IS NOT NULL) AS ok,
               (SELECT list(b.name) FROM bad b WHERE b.trajectory_id = p.trajectory_id) AS bad
        FROM picked p LEFT JOIN ok USING (trajectory_id)
        GROUP BY p.trajectory_id, p.group_id
        ORDER BY p.group_id NULLS LAST, p.trajectory_id
    """
    rows = run_checked(con, sql, {"names": names}, user_sql=where or "")
    existing = {
        tid: (value, status, meta)
        for tid, value, status, meta in con.execute(
            "SELECT trajectory_id, value, status, metadata FROM rewards WHERE name = $name AND scorer = $scorer",
            {"name": name, "scorer": scorer},
        ).fetchall()
    }
    summary = CombineSummary(name, scorer, run_id)
    out: list[dict[str, Any]] = []
    values_written: list[float] = []
    scored_at = utc_now()
    for tid, group_id, ok, bad in rows:
        components = {c["name"]: c for c in (ok or [])}
        if not components and not bad:
            continue
        meta: dict[str, Any] = {
            "kind": "combine",
            "weights": weights,
            "normalize": normalize,
            "components": {
                n: {"value": c["value"], "scorer": c["scorer"]} for n, c in sorted(components.items())
            },
        }
        missing = [n for n in names if n not in components]
        if missing:
            failed = [n for n in missing if n in (bad or [])]
            reason = "component_failed" if failed else "missing_component"
            row = reward_row(
                tid,
                name,
                scorer,
                value=None,
                status="failed",
                error=reason,
                explanation=f"no successful {', '.join(f'`{n}`' for n in missing)} for this trajectory"
                + (f" (scoring failed: {', '.join(failed)})" if failed else ""),
                group_id=group_id,
                run_id=run_id,
                scored_at=scored_at,
                metadata=meta,
            )
            summary.failed[reason] = summary.failed.get(reason, 0) + 1
        else:
            value = combine_values({n: c["value"] for n, c in components.items()}, weights, normalize)
            terms = " + ".join(f"{weights[n]:g}*{n}({components[n]['value']:.3g})" for n in names)
            explanation = f"{terms} = {value:.4g}" + (
                f" (normalised by {sum(abs(w) for w in weights.values()):g})" if normalize else ""
            )
            row = reward_row(
                tid,
                name,
                scorer,
                value=value,
                status="ok",
                explanation=explanation,
                group_id=group_id,
                run_id=run_id,
                scored_at=scored_at,
                metadata=meta,
            )
            values_written.append(value)
            summary.combined += 1
        previous = existing.get(tid)
        if (
            previous is not None
            and previous[0] == row["value"]
            and previous[1] == row["status"]
            and (json.loads(previous[2] or "{}").get("components") == meta["components"])
        ):
            summary.unchanged += 1
            continue
        out.append(row)
    if out:
        write(lake, "rewards", out)
    if values_written:
        summary.mean = sum(values_written) / len(values_written)
    return summary
