"""RULER against the stand-in judge on loopback: prompt, id mapping, retries, failures, cache, cost."""

from __future__ import annotations

import json
import re
import time

import pytest

from judging.config import JudgeConfig, ScoreConfig
from judging.errors import ConfigValueError, JudgeConfigError, JudgeUnreachableError
from judging.ruler import RulerJudge, ruler_score_group
from judging.ruler.cache import JudgeCache
from judging.stage import score
from store.catalog.connection import connect
from store.writer import write
from tests.judging.fake_judge import BLOCK, FakeJudge, JudgeServer, rule_score
from tests.judging.helpers import good_answers, make_group, write_groups

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

QUIET = ScoreConfig(progress=False)


def rewards(lake, name="ruler"):
    con = connect(lake)
    rows = con.execute(
        "SELECT trajectory_id, value, status, error, explanation, metadata, scorer FROM rewards WHERE name = ? "
        "ORDER BY trajectory_id",
        [name],
    ).fetchall()
    return {
        r[0]: {
            "value": r[1],
            "status": r[2],
            "error": r[3],
            "explanation": r[4],
            "metadata": json.loads(r[5]),
            "scorer": r[6],
        }
        for r in rows
    }


def expected_value(trajectory_id: str) -> float:
    i = int(trajectory_id.rsplit("-", 1)[1])
    return rule_score(good_answers(i + 1)[i])


def test_scores_follow_the_judge_rule_matched_by_id(lake, judge_server, judge_config):
    write_groups(lake, 3, size=5)
    summary = score(lake, "ruler", QUIET, judge=judge_config)
    assert (summary.groups_scored, summary.groups_failed, summary.judge_calls) == (3, 0, 3)
    got = rewards(lake)
    assert len(got) == 15
    for tid, row in got.items():
        # the stand-in returns entries in reverse label order: positions would be wrong
        assert row["value"] == expected_value(tid), tid
        assert row["status"] == "ok" and row["explanation"].endswith("good")
        assert row["scorer"] == summary.scorer and row["scorer"].startswith("ruler:stand-in-judge:rubric-")


def test_the_prompt_sent_holds_the_rubric_the_prefix_once_and_every_id(lake, judge_server, judge_config):
    write_groups(lake, 1, size=4)
    config = JudgeConfig(**{**judge_config.__dict__, "rubric": "Prefer answers that say good."})
    score(lake, "ruler", QUIET, judge=config)
    [request] = judge_server.judge.requests
    assert request["model"] == "stand-in-judge"
    assert request["response_format"]["type"] == "json_schema"
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "Prefer answers that say good." in system
    assert user.count("Task of g000: answer well.") == 1
    assert [label for label, _ in BLOCK.findall(user)] == ["t1", "t2", "t3", "t4"]


def test_id_mapping_holds_under_any_shuffle(lake, judge_server, judge_config):
    write_groups(lake, 2, size=5)
    seeds, labels = set(), {}
    for seed in range(4):
        config = JudgeConfig(**{**judge_config.__dict__, "seed": seed, "use_cache": False})
        score(lake, "ruler", ScoreConfig(progress=False, force=True), judge=config)
        for tid, row in rewards(lake).items():
            assert row["value"] == expected_value(tid)
            seeds.add(row["metadata"]["seed"])
            labels.setdefault(tid, set()).add(row["metadata"]["label"])
    assert len(seeds) > 2  # the seed is recorded, and it changed the order
    assert any(len(seen) > 1 for seen in labels.values())  # the same trajectory was shown under other labels


@pytest.mark.parametrize(
    "fault", ["429", "500", "timeout", "invalid_json", "missing_id", "extra_id", "out_of_range", "prose"]
)
def test_transient_faults_are_retried(lake, judge_server, judge_config, fault):
    write_groups(lake, 1, size=3)
    judge_server.judge.faults.append(fault)
    judge_server.judge.timeout_sleep_s = 3.0
    config = JudgeConfig(**{**judge_config.__dict__, "timeout_s": 0.5, "concurrency": 1})
    summary = score(lake, "ruler", QUIET, judge=config)
    assert summary.groups_scored == 1 and summary.failures == {}
    got = rewards(lake)
    assert all(row["value"] == expected_value(tid) for tid, row in got.items())
    meta = next(iter(got.values()))["metadata"]
    if fault == "prose":
        assert meta["attempts"] == 1  # not a fault for the tolerant parser
    else:
        assert meta["attempts"] == 2 and len(meta["retry_reasons"]) == 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("500", "judge_server_error"),
        ("429", "judge_rate_limited"),
        ("invalid_json", "invalid_json"),
        ("missing_id", "missing_ids"),
        ("extra_id", "unknown_ids"),
        ("out_of_range", "score_out_of_range"),
    ],
)
def test_persistent_faults_are_recorded_failures_never_zeros(lake, judge_server, judge_config, fault, reason):
    write_groups(lake, 2, size=3)
    judge_server.judge.always = fault
    summary = score(lake, "ruler", QUIET, judge=judge_config)
    assert (summary.groups_scored, summary.groups_failed) == (0, 2)
    assert summary.failures == {reason: 6}
    got = rewards(lake)
    assert {(r["status"], r["error"], r["value"]) for r in got.values()} == {("failed", reason, None)}
    assert all(r["metadata"]["attempts"] == judge_config.max_attempts for r in got.values())
    assert not connect(lake).execute("SELECT count(*) FROM latest_rewards").fetchone()[0]
    # the judge recovers: the rerun retries exactly the failed groups
    judge_server.judge.always = None
    again = score(lake, "ruler", QUIET, judge=judge_config)
    assert (again.groups_scored, again.groups_skipped) == (2, 0)
    assert {r["status"] for r in rewards(lake).values()} == {"ok"}


def test_timeouts_exhausting_attempts_are_recorded(lake, judge_server, judge_config):
    write_groups(lake, 1, size=2)
    judge_server.judge.always = "timeout"
    judge_server.judge.timeout_sleep_s = 1.0
    config = JudgeConfig(**{**judge_config.__dict__, "timeout_s": 0.2, "max_attempts": 2})
    summary = score(lake, "ruler", QUIET, judge=config)
    assert summary.failures == {"judge_timeout": 2}


def test_rejected_credentials_stop_the_run_and_keep_what_was_written(lake, judge_server, judge_config):
    write_groups(lake, 2, size=2)
    judge_server.judge.always = "401"
    with pytest.raises(JudgeConfigError, match="HTTP 401") as info:
        score(lake, "ruler", QUIET, judge=judge_config)
    assert info.value.status == 401 and "--judge-model" in str(info.value)
    assert rewards(lake) == {}  # no failed rows for a configuration error: nothing to retry per group


def test_endpoint_without_json_schema_falls_back_to_the_tolerant_parser(lake, judge_config):
    with JudgeServer(FakeJudge(supports_schema=False)) as server:
        write_groups(lake, 2, size=3)
        config = JudgeConfig(**{**judge_config.__dict__, "base_url": server.base_url})
        summary = score(lake, "ruler", QUIET, judge=config)
        assert summary.groups_scored == 2 and any("tolerant" in n for n in summary.notes)
        formats = [(r.get("response_format") or {}).get("type") for r in server.judge.requests]
        assert formats[0] == "json_schema" and formats[-1] is None
    assert all(row["value"] == expected_value(tid) for tid, row in rewards(lake).items())


def test_rerun_makes_no_judge_call_and_cache_survives_lost_rows(lake, judge_server, judge_config):
    write_groups(lake, 3, size=4)
    first = score(lake, "ruler", QUIET, judge=judge_config)
    assert first.judge_calls == 3 and first.prompt_tokens > 0
    again = score(lake, "ruler", QUIET, judge=judge_config)
    assert (again.judge_calls, again.groups_skipped, again.rows_written) == (0, 3, 0)
    # rows "lost" (a forced re-score, as after a kill before the commit): answered from the cache
    forced = score(lake, "ruler", ScoreConfig(progress=False, force=True), judge=judge_config)
    assert (forced.judge_calls, forced.cache_hits, forced.prompt_tokens) == (0, 3, 0)
    assert len(judge_server.judge.requests) == 3
    assert len(JudgeCache(lake)) == 3
    meta = next(iter(rewards(lake).values()))["metadata"]
    assert meta["cached"] is True and meta["prompt_tokens"] > 0  # what the original call cost


def test_a_changed_group_or_rubric_misses_the_cache(lake, judge_server, judge_config):
    write_groups(lake, 1, size=3)
    score(lake, "ruler", QUIET, judge=judge_config)
    # a new member of the group: the group is no longer fully scored and its content changed
    late = make_group("g000", good_answers(4))[3]
    write(lake, "trajectories", [late])
    second = score(lake, "ruler", QUIET, judge=judge_config)
    assert (second.judge_calls, second.groups_scored) == (1, 1)
    other = JudgeConfig(**{**judge_config.__dict__, "rubric": "Be harsh."})
    third = score(lake, "ruler", QUIET, judge=other)
    assert third.judge_calls == 1 and third.scorer != second.scorer
    assert len(judge_server.judge.requests) == 3


def test_tokens_and_cost_are_recorded(lake, judge_server, judge_config):
    write_groups(lake, 2, size=3)
    config = JudgeConfig(**{**judge_config.__dict__, "input_cost_per_mtok": 2.0, "output_cost_per_mtok": 8.0})
    summary = score(lake, "ruler", QUIET, judge=config)
    meta = next(iter(rewards(lake).values()))["metadata"]
    expected = (meta["prompt_tokens"] * 2.0 + meta["completion_tokens"] * 8.0) / 1e6
    assert meta["cost_usd"] == pytest.approx(expected) and meta["prompt_tokens"] > 0
    assert summary.cost_usd == pytest.approx(2 * expected, rel=0.2)
    assert summary.prompt_tokens + summary.completion_tokens > 0


def test_small_groups_and_ungrouped_trajectories_are_not_judged(lake, judge_server, judge_config):
    write_groups(lake, 1, size=3)
    write(lake, "trajectories", make_group("solo", ["only one"]))
    summary = score(lake, "ruler", QUIET, judge=judge_config)
    assert (summary.groups_scored, summary.groups_too_small) == (1, 1)
    assert "min_group_size" in summary.notes[0]


def test_where_selects_whole_groups(lake, judge_server, judge_config):
    write_groups(lake, 3, size=3)
    summary = score(
        lake, "ruler", ScoreConfig(progress=False, where="trajectory_id = 'g001-2'"), judge=judge_config
    )
    assert summary.groups_scored == 1
    assert sorted(rewards(lake)) == ["g001-0", "g001-1", "g001-2"]


def test_ruler_score_group_for_evaluation_gates(judge_config):
    group = make_group("eval", good_answers(3))
    verdict = ruler_score_group(group, judge_config, group_id="eval")
    assert verdict.ok and {tid: v.score for tid, v in verdict.verdicts.items()} == {
        "eval-0": 0.0,
        "eval-1": 0.25,
        "eval-2": 0.5,
    }
    assert re.fullmatch(r"t[123]", verdict.verdicts["eval-0"].label)


def test_groups_without_content_fail_with_a_reason_and_cost_nothing(lake, judge_server, judge_config):
    write_groups(lake, 1, size=2)
    hidden = make_group("hidden", ["secret", "secret too"])
    for t in hidden:
        t["has_content"] = False
    write(lake, "trajectories", hidden)
    summary = score(lake, "ruler", QUIET, judge=judge_config)
    assert (summary.groups_scored, summary.groups_failed, summary.judge_calls) == (1, 1, 1)
    got = rewards(lake)
    assert got["hidden-0"]["error"] == "no_content" and "`hidden-1`" in got["hidden-0"]["explanation"]


def test_a_judge_that_is_down_stops_the_run(lake, judge_config):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    write_groups(lake, 20, size=2)
    config = JudgeConfig(
        **{**judge_config.__dict__, "base_url": f"http://127.0.0.1:{port}/v1", "max_attempts": 2}
    )
    with pytest.raises(JudgeUnreachableError, match="rerun") as info:
        score(lake, "ruler", QUIET, judge=config)
    assert info.value.groups == 3
    failed = rewards(lake)
    # the failures seen are recorded, the rest of the groups are left for the rerun
    assert {r["error"] for r in failed.values()} == {"judge_unreachable"}
    assert 3 * 2 <= len(failed) < 20 * 2


def test_calls_run_concurrently_under_the_limit(lake, judge_server, judge_config):
    write_groups(lake, 12, size=2)
    judge_server.judge.delay_s = 0.15
    config = JudgeConfig(**{**judge_config.__dict__, "concurrency": 3})
    started = time.perf_counter()
    summary = score(lake, "ruler", QUIET, judge=config)
    assert summary.groups_scored == 12
    assert judge_server.judge.max_in_flight == 3
    assert time.perf_counter() - started < 12 * 0.15  # not one at a time


@pytest.mark.parametrize(
    ("mode", "sent"), [("none", None), ("json_object", "json_object"), ("json_schema", "json_schema")]
)
def test_structured_output_modes(lake, judge_server, judge_config, mode, sent):
    write_groups(lake, 1, size=2)
    config = JudgeConfig(**{**judge_config.__dict__, "structured_output": mode})
    assert score(lake, "ruler", QUIET, judge=config).groups_scored == 1
    [request] = judge_server.judge.requests
    assert (request.get("response_format") or {}).get("type") == sent
    if mode == "json_schema":
        schema = request["response_format"]["json_schema"]
        assert schema["strict"] is True and schema["schema"]["required"] == ["scores"]


def test_ruler_without_a_named_judge_model_is_refused_before_any_call() -> None:
    with pytest.raises(ConfigValueError, match="RULER needs a judge model") as raised:
        RulerJudge(JudgeConfig())
    assert raised.value.field == "model"
