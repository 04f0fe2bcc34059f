"""Scoring stages: each configured reward over a round's groups, then the combined reward and its stats.

They return judging's own results (`ScoreSummary` per scoring run, `RewardStats` of the
reward training uses); the flow turns the summaries into its artifact's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flows.config.root import Settings
from flows.stages.common import lake_of
from judging import ScoreConfig, combine, resolve_reward_key, score
from judging.summary import reward_stats
from store.vocabulary import equals

if TYPE_CHECKING:
    from judging.summary import RewardStats, ScoreSummary


@dataclass(frozen=True)
class RoundScores:
    """A round's scoring: each scoring run's summary (one per reward, or per reward and chunk of
    groups when the flow shards them) and the stats of the reward training uses over all its groups."""

    stats: RewardStats
    runs: list[ScoreSummary]


def rewards_to_score(config: Settings) -> list[str]:
    """The rewards a round is scored with (`ruler` among them uses the `[judge]` table)."""
    return list(config.score.rewards)


def shard_groups(group_ids: list[str] | None, shards: int) -> list[list[str] | None]:
    """`group_ids` in `shards` chunks (scoring tasks); all groups (None) stay one."""
    if group_ids is None or shards <= 1:
        return [group_ids]
    return [chunk for k in range(shards) if (chunk := group_ids[k::shards])]


def merge_score_rows(runs: list[ScoreSummary]) -> list[dict[str, Any]]:
    """The scoring artifact's rows: one per reward, its chunks' counts summed."""
    counts = ("groups_scored", "groups_skipped", "groups_failed", "trajectories_scored")
    merged: dict[str, dict[str, Any]] = {}
    for run in runs:
        row = merged.setdefault(
            run.reward, {"reward": run.reward, "scorer": run.scorer, **dict.fromkeys(counts, 0)}
        )
        for name in counts:
            row[name] += getattr(run, name)
    return list(merged.values())


def replay_filter(group_ids: list[str] | None) -> str:
    """The `--where` of a scoring run over replayed groups (all of them when `group_ids` is None)."""
    where = equals("source", "replay", table="trajectories")
    if group_ids:
        quoted = ", ".join("'" + g.replace("'", "''") + "'" for g in group_ids)
        where += f" AND group_id IN ({quoted})"
    return where


def training_reward(config: Settings) -> str:
    """The name of the reward training reads (`score.reward`, written as a spec or as a name)."""
    return resolve_reward_key(config.score.reward, config.score.rewards, combined=bool(config.score.weights))[
        1
    ]


def combined_weights(config: Settings) -> dict[str, float]:
    """`score.weights` by the names the rewards' rows have (each key written as a spec or a name)."""
    return {resolve_reward_key(k, config.score.rewards)[1]: w for k, w in config.score.weights.items()}


def score_reward(config: Settings, reward: str, group_ids: list[str] | None = None) -> ScoreSummary:
    """Score the replayed trajectories (of `group_ids`) with one reward; skips what that scorer already scored."""
    judge = config.judge if reward == "ruler" else None
    return score(
        lake_of(config), reward, ScoreConfig(where=replay_filter(group_ids), progress=False), judge=judge
    )


def finish_scoring(config: Settings, group_ids: list[str] | None = None) -> RewardStats:
    """Write the combined reward (when weights are configured); stats of the reward training uses."""
    lake = lake_of(config)
    if config.score.weights:
        combine(lake, combined_weights(config), "combined", where=replay_filter(group_ids))
    return reward_stats(lake, training_reward(config), group_ids)


def score_round(config: Settings, group_ids: list[str] | None = None) -> RoundScores:
    """Every configured reward, one after the other, then the training reward's stats (the flow
    runs the rewards as concurrent tasks instead)."""
    runs = [score_reward(config, reward, group_ids) for reward in rewards_to_score(config)]
    return RoundScores(finish_scoring(config, group_ids), runs)
