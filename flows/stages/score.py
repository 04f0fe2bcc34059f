"""Scoring stages: each configured reward over a round's groups, then the combined reward and its stats."""

from __future__ import annotations

from typing import Any

import store
from flows.config import TrajlakeConfig
from flows.stages.common import lake_of


def rewards_to_score(config: TrajlakeConfig) -> list[str]:
    """The rewards a round is scored with (`ruler` among them uses the `[judge]` table)."""
    return list(config.score.rewards)


def shard_groups(group_ids: list[str] | None, shards: int) -> list[list[str] | None]:
    """`group_ids` in `shards` chunks (scoring tasks); all groups (None) stay one."""
    if group_ids is None or shards <= 1:
        return [group_ids]
    return [chunk for k in range(shards) if (chunk := group_ids[k::shards])]


def merge_score_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per reward from its chunks' rows (counts summed)."""
    merged: dict[str, dict[str, Any]] = {}
    for row in rows:
        into = merged.setdefault(
            row["reward"], {**row, **{k: 0 for k, v in row.items() if isinstance(v, int)}}
        )
        for key, value in row.items():
            if isinstance(value, int):
                into[key] += value
    return list(merged.values())


def replay_filter(group_ids: list[str] | None) -> str:
    """The `--where` of a scoring run over replayed groups (all of them when `group_ids` is None)."""
    where = store.equals("source", "replay", table="trajectories")
    if group_ids:
        quoted = ", ".join("'" + g.replace("'", "''") + "'" for g in group_ids)
        where += f" AND group_id IN ({quoted})"
    return where


def score_reward(config: TrajlakeConfig, reward: str, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Score the replayed trajectories (of `group_ids`) with one reward; skips what that scorer already scored."""
    from judging import ScoreConfig, score

    judge = config.build("judge") if reward == "ruler" else None
    summary = score(
        lake_of(config), reward, ScoreConfig(where=replay_filter(group_ids), progress=False), judge=judge
    )
    return {
        "reward": summary.reward,
        "scorer": summary.scorer,
        "groups_scored": summary.groups_scored,
        "groups_skipped": summary.groups_skipped,
        "groups_failed": summary.groups_failed,
        "trajectories_scored": summary.trajectories_scored,
    }


def finish_scoring(config: TrajlakeConfig, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Write the combined reward (when weights are configured); stats of the reward training uses."""
    from judging import combine
    from judging.summary import reward_stats

    lake = lake_of(config)
    if config.score.weights:
        combine(lake, config.score.weights, "combined", where=replay_filter(group_ids))
    return reward_stats(lake, config.score.reward, group_ids).as_dict()


def score_round(config: TrajlakeConfig, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Every configured reward, one after the other, then the training reward's stats (the flow
    runs the rewards as concurrent tasks instead)."""
    table = [score_reward(config, reward, group_ids) for reward in rewards_to_score(config)]
    return {**finish_scoring(config, group_ids), "table": table}
