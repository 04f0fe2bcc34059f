"""The scoring stage's artifact rows: a reward scored in chunks (`pipeline.replay_shards`) is one row."""

from __future__ import annotations

from flows.stages.score import merge_score_rows
from judging.summary import ScoreSummary


def test_a_rewards_chunks_merge_into_one_row_with_their_counts_summed() -> None:
    chunks = [
        ScoreSummary("exact_match", "fn:exact_match", "run-1", "function", groups_scored=2, groups_skipped=1),
        ScoreSummary("ruler", "ruler:judge", "run-2", "ruler", groups_scored=1, groups_failed=1),
        ScoreSummary(
            "exact_match", "fn:exact_match", "run-3", "function", groups_scored=3, trajectories_scored=12
        ),
    ]
    assert merge_score_rows(chunks) == [
        {
            "reward": "exact_match",
            "scorer": "fn:exact_match",
            "groups_scored": 5,
            "groups_skipped": 1,
            "groups_failed": 0,
            "trajectories_scored": 12,
        },
        {
            "reward": "ruler",
            "scorer": "ruler:judge",
            "groups_scored": 1,
            "groups_skipped": 0,
            "groups_failed": 1,
            "trajectories_scored": 0,
        },
    ]
