"""What a scoring run did, as numbers: `ScoreSummary`, built from the rows the run wrote.

The numbers that matter before training: how many groups got scores, how many
failed and why, the mean and spread of the rewards, and the share of groups whose
rewards are all equal: GRPO's advantage is zero for such a group, so it teaches nothing.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from store.catalog.connection import connect
from store.lake import Lake
from store.vocabulary import equals


@dataclass
class ValueStats:
    """Distribution of one reward name's successful values in one run."""

    name: str
    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    groups: int = 0  # groups with 2+ scored trajectories
    all_equal_groups: int = 0

    @property
    def all_equal_share(self) -> float | None:
        return self.all_equal_groups / self.groups if self.groups else None


@dataclass
class ScoreSummary:
    """The outcome of one `score` run for one reward."""

    reward: str
    scorer: str
    run_id: str
    kind: str  # 'ruler' | 'function' | 'sql'
    groups_selected: int = 0
    groups_scored: int = 0
    groups_failed: int = 0
    groups_skipped: int = 0  # already scored by this scorer
    groups_too_small: int = 0
    trajectories_scored: int = 0
    trajectories_failed: int = 0
    trajectories_skipped: int = 0
    trajectories_out_of_scope: int = 0  # left out by default: the reward cannot score them
    failures: dict[str, int] = field(default_factory=dict)  # reason -> rows
    values: dict[str, ValueStats] = field(default_factory=dict)
    judge_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    rows_written: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for Prefect artifacts and JSON output)."""
        out = {k: v for k, v in self.__dict__.items() if k != "values"}
        out["values"] = {
            name: {**s.__dict__, "all_equal_share": s.all_equal_share} for name, s in self.values.items()
        }
        return out


def value_stats(rows: list[dict[str, Any]]) -> dict[str, ValueStats]:
    """Per reward name: count, mean, population std, range, and all-equal groups among `rows`."""
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] == "ok" and row["value"] is not None:
            by_name[row["name"]].append(row)
    stats: dict[str, ValueStats] = {}
    for name, items in sorted(by_name.items()):
        values = [r["value"] for r in items]
        mean = sum(values) / len(values)
        s = ValueStats(
            name,
            len(values),
            mean,
            math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)),
            min(values),
            max(values),
        )
        groups: dict[str, list[float]] = defaultdict(list)
        for r in items:
            if r.get("group_id") is not None:
                groups[r["group_id"]].append(r["value"])
        for members in groups.values():
            if len(members) >= 2:
                s.groups += 1
                s.all_equal_groups += int(max(members) - min(members) <= 1e-12)
        stats[name] = s
    return stats


def count_failures(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Failed rows by reason code."""
    return dict(Counter(r["error"] or "unknown" for r in rows if r["status"] == "failed"))


@dataclass
class RewardStats:
    """One reward over a set of replayed groups: what a training round will see."""

    reward: str
    mean: float
    std: float
    scored: int  # trajectories with a value
    equal_groups: int  # groups whose values are all equal: no GRPO signal

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def reward_stats(lake: Lake | str, reward: str, group_ids: list[str] | None = None) -> RewardStats:
    """Mean, spread and all-equal groups of `reward` over `group_ids` (every replayed group if None)."""
    with connect(lake, read_only=True) as con:
        con.register("__groups", pa.table({"group_id": pa.array(list(group_ids or []), pa.string())}))

        def within(alias: str) -> str:
            return f"AND {alias}.group_id IN (SELECT group_id FROM __groups)" if group_ids else ""

        mean, std, scored = con.execute(
            f"""
            SELECT avg(r.value), coalesce(stddev_pop(r.value), 0), count(*)
            FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
            WHERE r.name = $reward AND {equals("t.source", "replay", table="trajectories")} {within("t")}
            """,
            {"reward": reward},
        ).fetchall()[0]
        (equal,) = con.execute(
            f"SELECT count(*) FROM groups g WHERE name = $reward AND all_equal {within('g')}",
            {"reward": reward},
        ).fetchall()[0]
    return RewardStats(reward, float(mean or 0.0), float(std or 0.0), int(scored), int(equal))
