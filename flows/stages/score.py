"""Scoring stages: each configured reward over a round's groups, then the combined reward and its stats.

They return judging's own results (`ScoreSummary` per scoring run, `RewardStats` of the
reward training uses); the flow turns the summaries into its artifact's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flows.config.sections import ScoreSettings
from judging.config import JudgeConfig
from store.lake import Lake
from store.vocabulary import equals

if TYPE_CHECKING:
    from judging.summary import RewardStats, ScoreSummary


@dataclass(frozen=True)
class RoundScores:
    """A round's scoring: each scoring run's summary (one per reward, or per reward and chunk of
    groups when the flow shards them) and the stats of the reward training uses over all its groups."""

    stats: RewardStats
    runs: list[ScoreSummary]


def rewards_to_score(score: ScoreSettings) -> list[str]:
    """The rewards a round is scored with (`ruler` among them uses the `[judge]` table)."""
    return list(score.rewards)


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


def training_reward(score: ScoreSettings) -> str:
    """The name of the reward training reads (`score.reward`, written as a spec or as a name)."""
    from judging.registry import resolve_reward_key

    return resolve_reward_key(score.reward, score.rewards, combined=bool(score.weights))[1]


def training_reward_needs_expected(score: ScoreSettings) -> bool:
    """Whether the reward training reads scores only replays of scenarios with an expected outcome
    (a reward marked `needs_expected`): then a round replays only such scenarios. `ruler`,
    `combined` and a spec that does not resolve (the score stage names it) say no."""
    from judging.errors import RewardSpecError
    from judging.registry import COMBINED, get_reward, resolve_reward_key
    from judging.rewards.base import EXPECTED_OUTCOME

    spec, _ = resolve_reward_key(score.reward, score.rewards, combined=bool(score.weights))
    if spec in ("ruler", COMBINED):
        return False
    try:
        return get_reward(spec).scope == EXPECTED_OUTCOME
    except RewardSpecError:
        return False


def combined_weights(score: ScoreSettings) -> dict[str, float]:
    """`score.weights` by the names the rewards' rows have (each key written as a spec or a name)."""
    from judging.registry import resolve_reward_key

    return {resolve_reward_key(k, score.rewards)[1]: w for k, w in score.weights.items()}


def score_reward(
    lake: Lake, reward: str, group_ids: list[str] | None = None, *, judge: JudgeConfig
) -> ScoreSummary:
    """Score the replayed trajectories (of `group_ids`) with one reward; skips what that scorer already
    scored (`judge`: the `[judge]` table, which `ruler` uses)."""
    from judging.config import ScoreConfig
    from judging.stage import score

    where = ScoreConfig(where=replay_filter(group_ids), progress=False)
    return score(lake, reward, where, judge=judge if reward == "ruler" else None)


def finish_scoring(lake: Lake, group_ids: list[str] | None = None, *, score: ScoreSettings) -> RewardStats:
    """Write the combined reward (when weights are configured); stats of the reward training uses."""
    from judging.combine import combine
    from judging.summary import reward_stats

    if score.weights:
        combine(lake, combined_weights(score), "combined", where=replay_filter(group_ids))
    return reward_stats(lake, training_reward(score), group_ids)


def score_round(
    lake: Lake, group_ids: list[str] | None = None, *, score: ScoreSettings, judge: JudgeConfig
) -> RoundScores:
    """Every configured reward, one after the other, then the training reward's stats (the flow
    runs the rewards as concurrent tasks instead)."""
    runs = [score_reward(lake, reward, group_ids, judge=judge) for reward in rewards_to_score(score)]
    return RoundScores(finish_scoring(lake, group_ids, score=score), runs)
