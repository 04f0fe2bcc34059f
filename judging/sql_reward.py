"""SQL expression rewards: a DuckDB expression over `candidates`, evaluated by the database.

`--sql-reward "CASE WHEN final_output ILIKE '%refund%' THEN 1 ELSE 0 END"` scores every
selected trajectory in one query, with no Python per row. The expression sees the
`candidates` columns (every trajectory column plus the scenario's `expected` and
`split`; see `judging.select`) and may use subqueries over the other views, e.g.
`1 - (SELECT count(*) FROM messages m WHERE m.trajectory_id = candidates.trajectory_id AND m.is_error) / 10`.
A NULL result is a failed row (`null_value`), never a zero; so is NaN or infinity
(`invalid_value`). The `scorer` is `sql:<sha256 of the expression, 12 hex>`, so a
different expression never mixes with old values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from judging.errors import RewardSpecError


@dataclass(frozen=True)
class SqlReward:
    """A reward computed by a SQL expression."""

    expression: str
    name: str = "sql"

    def __post_init__(self) -> None:
        if not self.expression.strip():
            raise RewardSpecError("--sql-reward", "the SQL expression is empty")

    @property
    def scorer(self) -> str:
        normalised = " ".join(self.expression.split())
        return "sql:" + hashlib.sha256(normalised.encode()).hexdigest()[:12]


def sql_reward_query(reward: SqlReward, candidates: str, where: str, force: bool, done: str) -> str:
    """The query giving (trajectory_id, group_id, value) for every trajectory to score."""
    skip = "" if force else f"AND trajectory_id NOT IN ({done})"
    where_sql = where or "WHERE true"
    return f"""
        WITH candidates AS ({candidates})
        SELECT trajectory_id, group_id, CAST(({reward.expression}) AS DOUBLE) AS value
        FROM candidates {where_sql} {skip}
        ORDER BY group_id NULLS LAST, trajectory_id
    """
