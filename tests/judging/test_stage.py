"""The scoring stage on a real lake: programmatic and SQL rewards, idempotency, combine, agreement."""

from __future__ import annotations

import json

import pytest

from flows.cli import app
from judging.agreement import agreement
from judging.combine import combine, combined_scorer
from judging.config import ScoreConfig
from judging.errors import SqlRewardError
from judging.registry import get_reward
from judging.sql_reward import SqlReward
from judging.stage import score
from store.catalog.connection import connect
from store.rows import utc_now
from store.writer import write
from tests.judging.helpers import make_group, make_scenario, make_traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

QUIET = ScoreConfig(progress=False)


def rows(lake, name: str) -> dict[str, tuple]:
    con = connect(lake)
    result = con.execute(
        "SELECT trajectory_id, value, status, error, explanation, group_id, scorer FROM rewards "
        "WHERE name = ? ORDER BY trajectory_id",
        [name],
    ).fetchall()
    return {r[0]: r[1:] for r in result}


@pytest.fixture
def qa_lake(lake):
    """Two groups answering a scenario with an expected answer, one production trace without scenario."""
    write(lake, "scenarios", [make_scenario("capital", '{"answer": "Paris"}')])
    trajectories = [
        *make_group("g1", ["Paris", "paris.", "Lyon"], scenario_id="capital"),
        *make_group("g2", ["Paris", "Paris"], scenario_id="capital"),
        make_traj("prod-1", '{"ok": true}'),
    ]
    write(lake, "trajectories", trajectories)
    return lake


def test_builtin_reward_scores_and_records_failures(qa_lake):
    # `where` of its own: everything, prod-1 (no scenario) included, is scored or failed
    summary = score(qa_lake, "exact_match", ScoreConfig(progress=False, where="true"))
    got = rows(qa_lake, "exact_match")
    assert {tid: r[0] for tid, r in got.items() if r[1] == "ok"} == {
        "g1-0": 1.0,
        "g1-1": 0.0,
        "g1-2": 0.0,
        "g2-0": 1.0,
        "g2-1": 1.0,
    }
    assert got["prod-1"][1:3] == ("failed", "no_expected")  # no scenario: a failure, not a zero
    assert summary.failures == {"no_expected": 1}
    assert summary.trajectories_scored == 5 and summary.trajectories_failed == 1
    stats = summary.values["exact_match"]
    assert stats.count == 5 and stats.mean == pytest.approx(0.6)
    assert (stats.groups, stats.all_equal_groups) == (2, 1)  # g2 is all 1.0: no GRPO signal
    assert got["g1-0"][5] == "judging.rewards.match:exact_match_reward@1"


def test_rerun_skips_what_this_scorer_scored_and_retries_failures(qa_lake):
    everything = ScoreConfig(progress=False, where="true")
    score(qa_lake, "normalized_match", everything)
    again = score(qa_lake, "normalized_match", everything)
    # five ok rows are skipped, the failed one is tried again (and fails again)
    assert (again.trajectories_skipped, again.rows_written) == (5, 1)
    write(qa_lake, "trajectories", [make_traj("prod-1", "Paris", scenario_id="capital")])
    third = score(qa_lake, "normalized_match", everything)
    assert third.rows_written == 1 and rows(qa_lake, "normalized_match")["prod-1"][:2] == (1.0, "ok")
    forced = score(qa_lake, "normalized_match", ScoreConfig(progress=False, where="true", force=True))
    assert forced.rows_written == 6


def test_by_default_a_reward_scores_what_it_can_and_counts_what_it_left_out(qa_lake):
    """exact_match needs an expected outcome: by default it scores replays of scenarios that have
    one, writes nothing for the rest (no `no_expected` row per production trace, rerun after
    rerun), and says how many it left out."""
    write(qa_lake, "scenarios", [make_scenario("open", None)])
    write(
        qa_lake,
        "trajectories",
        [make_traj("prod-2", "Paris", source="otel"), *make_group("g3", ["x", "y"], scenario_id="open")],
    )
    summary = score(qa_lake, "exact_match", QUIET)
    assert set(rows(qa_lake, "exact_match")) == {"g1-0", "g1-1", "g1-2", "g2-0", "g2-1"}
    assert summary.failures == {} and summary.trajectories_out_of_scope == 4  # prod-1, prod-2, g3's two
    assert any("left out 4 trajectories" in note for note in summary.notes)
    again = score(qa_lake, "exact_match", QUIET)
    assert again.rows_written == 0 and again.trajectories_out_of_scope == 4
    # a reward that needs no expected outcome still scores every trajectory
    assert len(rows(qa_lake, "valid_json")) == 0 and score(qa_lake, "valid_json", QUIET).rows_written == 9


def test_score_command_says_what_it_left_out(qa_lake):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["score", "-r", "exact_match", "--no-progress", "--lake", qa_lake.root])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "left out 1 trajectories it cannot score" in text and "--where true" in text
    assert "no_expected" not in text and set(rows(qa_lake, "exact_match")) == {
        f"g1-{i}" for i in range(3)
    } | {
        "g2-0",
        "g2-1",
    }


def test_where_filters_trajectories_with_scenario_columns(qa_lake):
    summary = score(qa_lake, "valid_json", ScoreConfig(progress=False, where="split IS NULL"))
    assert list(rows(qa_lake, "valid_json")) == ["prod-1"]
    assert summary.values["valid_json"].mean == 1.0


def test_import_path_rewards_with_dict_returns(qa_lake):
    summary = score(qa_lake, "tests.judging.custom_rewards:quality_parts_reward", QUIET)
    assert set(summary.values) == {"quality_parts.good", "quality_parts.short"}
    assert rows(qa_lake, "quality_parts.short")["g1-0"][0] == 1.0
    again = score(qa_lake, "tests.judging.custom_rewards:quality_parts_reward", QUIET)
    assert again.rows_written == 0


def test_a_raising_reward_fails_only_its_trajectories(qa_lake):
    summary = score(qa_lake, "tests.judging.custom_rewards:exploding_reward", QUIET)
    got = rows(qa_lake, "exploding")
    assert {tid for tid, r in got.items() if r[1] == "failed"} == {"g1-1", "g2-1"}
    assert "tool database offline" in got["g1-1"][3]
    assert summary.failures == {"reward_raised": 2}


def test_sql_reward_scores_in_duckdb(qa_lake):
    expr = "CASE WHEN final_output = json_extract_string(expected, '$.answer') THEN 1 ELSE 0 END"
    summary = score(qa_lake, SqlReward(expr, "sql_exact"), QUIET)
    got = rows(qa_lake, "sql_exact")
    assert {tid: r[0] for tid, r in got.items() if r[1] == "ok"} == {
        "g1-0": 1.0,
        "g1-1": 0.0,
        "g1-2": 0.0,
        "g2-0": 1.0,
        "g2-1": 1.0,
        "prod-1": 0.0,
    }
    # prod-1 has no scenario: `expected` is NULL and the CASE falls to ELSE 0; a bare comparison gives NULL
    score(
        qa_lake, SqlReward("(final_output = json_extract_string(expected, '$.answer'))::INT", "bare"), QUIET
    )
    assert rows(qa_lake, "bare")["prod-1"][1:3] == ("failed", "null_value")
    assert summary.scorer.startswith("sql:") and got["g1-0"][5] == summary.scorer
    assert score(qa_lake, SqlReward(expr, "sql_exact"), QUIET).rows_written == 0  # idempotent
    assert (
        score(qa_lake, SqlReward(expr, "sql_exact"), ScoreConfig(progress=False, force=True)).rows_written
        == 6
    )


def test_non_finite_sql_reward_values_are_failures_not_scores(qa_lake):
    expr = (
        "CASE WHEN trajectory_id = 'g1-0' THEN sqrt(-1) WHEN trajectory_id = 'g1-1' THEN 1.0 / 0 ELSE 0.5 END"
    )
    summary = score(qa_lake, SqlReward(expr, "odd"), QUIET)
    got = rows(qa_lake, "odd")
    assert got["g1-0"][:3] == (None, "failed", "invalid_value")  # NaN
    assert got["g1-1"][:3] == (None, "failed", "invalid_value")  # inf
    assert got["g1-2"][:3] == (0.5, "ok", None)
    assert summary.failures == {"invalid_value": 2}


def test_sql_reward_may_use_other_views(qa_lake):
    expr = "(SELECT count(*) FROM messages m WHERE m.trajectory_id = candidates.trajectory_id)"
    score(qa_lake, SqlReward(expr, "n_messages"), QUIET)
    assert rows(qa_lake, "n_messages")["g1-0"][0] == 3.0


@pytest.mark.parametrize(
    ("reward", "where", "match"),
    [
        (SqlReward("no_such_column + 1", "x"), None, "no_such_column"),
        (SqlReward("1", "x"), "agent_nmae = 'a'", "agent_nmae"),
        (SqlReward("CAST('abc' AS INTEGER)", "x"), None, "Conversion"),  # a runtime error, not a bind error
        (
            SqlReward("1) FROM trajectories; DROP VIEW rewards; SELECT (1", "x"),
            None,
            "Parser|single expression|read-only",
        ),
    ],
)
def test_bad_sql_names_the_sql_and_writes_nothing(qa_lake, reward, where, match):
    with pytest.raises(SqlRewardError, match=match) as info:
        score(qa_lake, reward, ScoreConfig(progress=False, where=where))
    assert "nothing was written" in str(info.value)
    assert rows(qa_lake, "x") == {}


def test_combined_reward_weights_named_rewards(qa_lake):
    score(qa_lake, "exact_match", ScoreConfig(progress=False, where="true"))  # prod-1 too: a failed row
    score(qa_lake, SqlReward("length(final_output) / 10.0", "brevity"), QUIET)
    weights = {"exact_match": 0.75, "brevity": 0.25}
    summary = combine(qa_lake, weights)
    got = rows(qa_lake, "combined")
    assert got["g1-0"][0] == pytest.approx((0.75 * 1.0 + 0.25 * 0.5) / 1.0)
    assert got["g1-0"][5] == combined_scorer(weights, True) == "combine:brevity=0.25,exact_match=0.75:norm"
    assert "0.75*exact_match(1)" in got["g1-0"][3]
    # prod-1 has brevity but exact_match failed: a failed combined row, not a partial sum
    assert got["prod-1"][1:3] == ("failed", "component_failed")
    assert summary.combined == 5 and summary.failed == {"component_failed": 1}
    assert combine(qa_lake, weights).unchanged == 6  # nothing changed: nothing rewritten
    write(qa_lake, "trajectories", [make_traj("g1-2", "Paris", group_id="g1", scenario_id="capital")])
    score(qa_lake, "exact_match", ScoreConfig(progress=False, force=True, where="trajectory_id = 'g1-2'"))
    rerun = combine(qa_lake, weights)
    assert rerun.unchanged == 5 and rows(qa_lake, "combined")["g1-2"][0] == pytest.approx(0.75 + 0.25 * 0.4)


def test_combine_rejects_bad_weights(qa_lake):
    with pytest.raises(ValueError, match="weights"):
        combine(qa_lake, {})
    with pytest.raises(ValueError, match="finite"):
        combine(qa_lake, {"a": float("nan")})


def test_agreement_is_rank_correlation_within_groups(lake):
    trajs = [t for g in range(3) for t in make_group(f"g{g}", ["a", "b", "c", "d"])]
    write(lake, "trajectories", trajs)
    values_a = [0.1, 0.4, 0.6, 0.9]
    values_b = {"g0": [1, 2, 3, 4], "g1": [4, 3, 2, 1], "g2": [5, 5, 5, 5]}  # same, reversed, constant
    now = utc_now()
    reward_rows = [
        {
            "trajectory_id": f"{g}-{i}",
            "name": name,
            "scorer": "s",
            "value": float(v),
            "group_id": g,
            "scored_at": now,
            "status": "ok",
        }
        for g in values_b
        for name, vals in (("a", values_a), ("b", values_b[g]))
        for i, v in enumerate(vals)
    ]
    write(lake, "rewards", reward_rows)
    report = agreement(lake, "a", "b")
    by_group = {g.group_id: g.spearman for g in report.per_group}
    assert by_group == {"g0": 1.0, "g1": -1.0, "g2": None}
    assert (report.groups, report.defined, report.constant_b) == (3, 2, 1)
    assert report.mean_spearman == 0.0 and report.pairwise_agreement == 0.5
    assert agreement(lake, "a", "b@other-scorer").groups == 0


def test_penalties_and_task_reward_in_one_lake(qa_lake):
    summary = score(qa_lake, "turn_penalty", QUIET)
    assert summary.values["turn_penalty"].max == 0.0
    assert get_reward("turn_penalty").scorer in {r[5] for r in rows(qa_lake, "turn_penalty").values()}


def test_metadata_records_the_function_and_version(qa_lake):
    score(qa_lake, "tests.judging.custom_rewards:answer_length_reward", QUIET)
    con = connect(qa_lake)
    meta, scorer = con.execute(
        "SELECT metadata, scorer FROM rewards WHERE name = 'answer_length' LIMIT 1"
    ).fetchone()
    assert json.loads(meta) == {
        "kind": "function",
        "path": "tests.judging.custom_rewards:answer_length_reward",
        "version": "7",
    }
    assert scorer == "tests.judging.custom_rewards:answer_length_reward@7"
