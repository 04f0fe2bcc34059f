"""`trajlake score`, `combine`, `agreement` and `sql` together, as a user runs them; resumption after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.judging.fake_judge import FakeJudge, JudgeServer
from tests.judging.helpers import make_scenario, write_groups
from tests.store.helpers import make_traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

runner = CliRunner()


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_ruler_and_programmatic_rewards_side_by_side_in_sql(lake, judge_server):
    write(lake, "scenarios", [make_scenario("s", '{"answer": "good good answer 2"}')])
    write_groups(lake, 3, size=3)
    judge = ["--judge-model", "stand-in-judge", "--judge-base-url", judge_server.base_url]
    out = cli("score", "--lake", lake.root, "--reward", "ruler", *judge, "--no-progress")
    assert "groups scored" in out and "ruler:stand-in-judge:rubric-" in out
    cli("score", "--lake", lake.root, "--reward", "valid_json", "--no-progress")
    cli(
        "score",
        "--lake",
        lake.root,
        "--sql-reward",
        "length(final_output) / 20.0",
        "--name",
        "brevity",
        "--no-progress",
    )
    query = (
        "SELECT r.group_id, r.trajectory_id, r.value AS ruler, r.explanation AS why, r.scorer AS judge, "
        "p.value AS valid_json, p.scorer AS checker FROM rewards r JOIN rewards p USING (trajectory_id) "
        "WHERE r.name = 'ruler' AND p.name = 'valid_json' ORDER BY r.trajectory_id"
    )
    table = json.loads(cli("sql", query, "--lake", lake.root, "--format", "json"))
    assert len(table) == 9 and {row["group_id"] for row in table} == {"g000", "g001", "g002"}
    assert table[2] == {
        "group_id": "g000",
        "trajectory_id": "g000-2",
        "ruler": 0.5,
        "why": "2 good",
        "judge": table[0]["judge"],
        "valid_json": 0.0,
        "checker": "judging.rewards.format:valid_json_reward@1",
    }
    # the acceptance check: re-running makes no judge call
    calls = len(judge_server.judge.requests)
    out = cli("score", "--lake", lake.root, "--reward", "ruler", *judge, "--no-progress", "--format", "json")
    [summary] = json.loads(out)
    assert summary["judge_calls"] == 0 and summary["groups_skipped"] == 3
    assert len(judge_server.judge.requests) == calls
    out = cli("combine", "--lake", lake.root, "-w", "ruler=0.8", "-w", "brevity=0.2")
    assert "9 combined" in out
    out = cli("agreement", "ruler", "brevity", "--lake", lake.root, "--groups")
    assert "pairwise agreement" in out and "g001" in out


def test_cli_errors_are_one_clear_line(lake, tmp_path):
    missing = runner.invoke(app, ["score", "--lake", str(tmp_path / "typo"), "--reward", "exact_match"])
    assert missing.exit_code == 2 and "no lake at" in missing.output  # not "0 reward rows"
    write(lake, "trajectories", [make_traj(0)])
    result = runner.invoke(app, ["score", "--lake", lake.root, "--reward", "exact"])
    assert result.exit_code == 1 and "reward `exact`" in result.output and "exact_match" in result.output
    result = runner.invoke(app, ["score", "--lake", lake.root, "--reward", "ruler"])
    assert result.exit_code == 2 and "--judge-model" in result.output
    result = runner.invoke(app, ["combine", "--lake", lake.root, "-w", "ruler"])
    assert result.exit_code == 2 and "name=number" in result.output


def _spawn_score(lake: Lake, base_url: str, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "flows.cli",
        "score",
        "--lake",
        lake.root,
        "--reward",
        "ruler",
        "--judge-model",
        "stand-in-judge",
        "--judge-base-url",
        base_url,
        "--concurrency",
        "1",
        "--no-progress",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the scoring subprocess"
        time.sleep(0.02)


def test_a_killed_run_resumes_without_paying_twice(lake):
    write_groups(lake, 10, size=3)
    with JudgeServer(FakeJudge(delay_s=0.25)) as server:
        proc = _spawn_score(lake, server.base_url, "--flush-every", "2")
        _wait_for(lambda: server.judge.answered >= 5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        answered_before = server.judge.answered
        con = connect(lake)
        committed = con.execute("SELECT count(DISTINCT group_id) FROM rewards").fetchone()[0]
        assert 2 <= committed < 10  # some batches committed, the rest lost with the process

        from judging.config import JudgeConfig, ScoreConfig
        from judging.stage import score

        config = JudgeConfig(model="stand-in-judge", base_url=server.base_url, backoff_s=0.01)
        summary = score(lake, "ruler", ScoreConfig(progress=False), judge=config)
        assert summary.groups_skipped == committed
        assert summary.groups_scored == 10 - committed
        # answers that arrived before the kill but were not committed come from the cache
        assert summary.cache_hits >= answered_before - committed - 1
        assert server.judge.answered <= 10 + 1  # at most the one in flight at the kill is paid twice
    final = (
        connect(lake)
        .execute("SELECT count(*), count(DISTINCT trajectory_id), bool_and(status = 'ok') FROM rewards")
        .fetchone()
    )
    assert final == (30, 30, True)


def test_ctrl_c_commits_what_was_judged(lake):
    write_groups(lake, 10, size=2)
    with JudgeServer(FakeJudge(delay_s=0.2)) as server:
        proc = _spawn_score(lake, server.base_url)  # default flush: nothing committed before the interrupt
        _wait_for(lambda: server.judge.answered >= 3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        answered = server.judge.answered
    said = err.decode()[-3000:]
    assert proc.returncode != 0, said
    groups = connect(lake).execute("SELECT count(DISTINCT group_id) FROM rewards").fetchone()[0]
    # interrupted mid-run, nothing judged was lost
    assert answered - 1 <= groups <= answered < 10, (answered, groups, said)


def test_two_workers_at_once_judge_each_group_once(lake):
    """Two scoring processes on one lake, started together: each group's verdict is paid once
    (a worker that finds another's claim waits for its verdict), and no cache file is torn."""
    write_groups(lake, 8, size=3)
    with JudgeServer(FakeJudge(delay_s=0.2)) as server:
        workers = [_spawn_score(lake, server.base_url, "--concurrency", "2") for _ in range(2)]
        for worker in workers:
            _, err = worker.communicate(timeout=180)
            assert worker.returncode == 0, err.decode()[-2000:]
        assert server.judge.answered == 8  # not 16
    cache = os.path.join(lake.root, "_cache", "judge")
    files = [os.path.join(d, f) for d, _, names in os.walk(cache) for f in names]
    assert len([f for f in files if f.endswith(".json")]) == 8
    assert not [f for f in files if f.endswith((".tmp", ".claim"))]  # nothing half-written or left claimed
    for path in files:
        with open(path) as handle:
            assert json.load(handle)["verdicts"]  # whole entries
    rows = connect(lake).execute("SELECT count(DISTINCT trajectory_id) FROM latest_rewards").fetchone()
    assert rows == (24,)
