"""End to end: `trajlake ingest langfuse` against the stand-in server, checked with `trajlake sql`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import ingest.langfuse.pull as pull_module
from ingest.langfuse.config import PullFilters, scope_of
from ingest.langfuse.errors import LangfuseUnavailable
from ingest.langfuse.pull import pull_langfuse
from ingest.langfuse.watermark import read_state
from store.catalog.versions import snapshot
from store.lake import Lake
from tests.ingest.langfuse.agent_traces import seed_agent_trace
from tests.ingest.langfuse.conftest import cli, make_config, sql, trace_id
from tests.ingest.langfuse.standin import StandinLangfuse

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

OBS = "/api/public/v2/observations"
SCORES = "/api/public/v3/scores"
ROLES = ["system", "user", "assistant", "tool", "assistant"]


def raw_rows(lake: Lake, table: str) -> int:
    """Rows in the table's files, duplicates included (what the views deduplicate)."""
    import duckdb

    if not lake.has_table(table):
        return 0
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{lake.root}/{table}/**/*.parquet')").fetchall()[0][
        0
    ]


def pull_cli(url: str, standin: StandinLangfuse, lake: Lake, *extra: str):  # type: ignore[no-untyped-def]
    env = {"LANGFUSE_PUBLIC_KEY": standin.public_key, "LANGFUSE_SECRET_KEY": standin.secret_key}
    return cli(
        "ingest",
        "langfuse",
        "--host",
        url,
        "--lake",
        lake.root,
        "--page-size",
        "5",
        "--no-progress",
        "--json",
        *extra,
        env=env,
    )


def test_pull_builds_trajectories_rewards_and_watermark(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake
) -> None:
    standin.fail_next(OBS, 429, times=1, retry_after="0")
    standin.fail_next(SCORES, 503, times=1, retry_after="0")
    result = pull_cli(langfuse_url, standin, lake)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["observations"] == 24 and report["trajectories"] >= 6 and report["retries"] == 2
    assert standin.count(OBS, 429) == 1 and standin.count(SCORES, 503) == 1

    trajectories = sql(lake, "SELECT * FROM trajectories ORDER BY trace_id")
    assert [t["trace_id"] for t in trajectories] == seeded
    first = trajectories[0]
    assert first["source"] == "langfuse" and first["trajectory_id"] == seeded[0]
    assert first["agent_name"] == "weather-agent" and first["model"] == "gpt-4o"
    assert (first["user_id"], first["session_id"]) == ("u-0", "s-0")
    assert (first["input_tokens"], first["output_tokens"]) == (280, 35)
    assert [m["role"] for m in first["messages"]] == ROLES
    call = first["messages"][2]["tool_calls"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    tool = first["messages"][3]
    assert (tool["name"], tool["tool_call_id"], tool["content"]) == ("get_weather", call["id"], "rainy, 14C")
    assert first["final_output"] == "It is rainy, 14C in Paris."
    assert [t["function"]["name"] for t in json.loads(first["tools"])] == ["get_weather"]
    assert first["status"] == "ok"

    rewards = {(r["name"], r["scorer"]): r for r in sql(lake, "SELECT * FROM rewards")}
    assert rewards[("helpfulness", "langfuse:api")]["value"] == 0.75
    assert rewards[("helpfulness", "langfuse:api")]["explanation"] == "mostly helpful"
    assert rewards[("correct", "langfuse:annotation")]["value"] == 0.0
    assert rewards[("verdict", "langfuse:eval")]["value"] == 1.0
    tone = rewards[("tone", "langfuse:api")]
    assert (tone["value"], tone["status"], tone["error"]) == (None, "failed", "unmapped_category")
    review = rewards[("review", "langfuse:annotation")]
    assert review["value"] is None and review["explanation"] == "Answer cites the tool."
    assert rewards[("tool_choice", f"langfuse:api@{seeded[2][:12]}0002")]["trajectory_id"] == seeded[2]
    assert len(rewards) == 6  # the session-level score has no single trajectory
    assert report["skipped"] == {"score_session_subject": 1}

    [mark] = sql(lake, "SELECT * FROM watermarks")
    state = json.loads(mark["state"])
    assert mark["source"] == "langfuse" and mark["scope"] == f"{langfuse_url}#all"
    assert mark["cursor"] is None and state["phase"] == "idle"
    assert datetime.fromisoformat(mark["watermark"]) > datetime.now(UTC) - timedelta(minutes=5)
    assert state["last_run"]["observations"] == 24


def test_second_run_fetches_nothing_new(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake
) -> None:
    config = make_config(langfuse_url, standin)
    first = pull_langfuse(lake, config)
    files = {t: snapshot(lake)[t].version for t in ("spans", "trajectories", "rewards")}
    second = pull_langfuse(lake, config)
    assert (first.observations, first.scores) == (24, 7)
    assert (second.observations, second.scores, second.trajectories, second.rewards) == (0, 0, 0, 0)
    assert second.window_from == first.window_to - config.overlap  # starts at the watermark minus the overlap
    assert {t: snapshot(lake)[t].version for t in files} == files  # nothing written but the watermark
    assert len(sql(lake, "SELECT * FROM watermarks")) == 1


def test_late_observation_of_an_older_trace_is_picked_up(
    standin: StandinLangfuse, langfuse_url: str, lake: Lake
) -> None:
    tid = trace_id(42)
    start = datetime.now(UTC) - timedelta(minutes=10)
    ids = seed_agent_trace(standin, tid, start, city="Oslo", include=("root", "gen1", "tool"))
    config = make_config(langfuse_url, standin)  # 30-minute overlap
    pull_langfuse(lake, config)
    [before] = sql(lake, f"SELECT * FROM trajectories WHERE trace_id = '{tid}'")
    assert [m["role"] for m in before["messages"]] == ROLES[:4]  # the final answer has not arrived

    # The last generation reaches Langfuse after the first pull, with its original start time.
    seed_agent_trace(standin, tid, start, city="Oslo", include=("gen2",))
    report = pull_langfuse(lake, config)
    assert report.observations == 4  # the overlap re-reads the trace's window
    assert report.spans_written == 1 and report.skipped["observation_unchanged"] == 3  # only the new one
    [after] = sql(lake, f"SELECT * FROM trajectories WHERE trace_id = '{tid}'")
    assert [m["role"] for m in after["messages"]] == ROLES
    assert after["final_output"] == "It is rainy, 14C in Oslo."
    assert sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 4
    assert ids["gen2"] in {
        json.loads(s["attributes"])["langfuse.observation.id"] for s in sql(lake, "SELECT * FROM spans")
    }

    # Re-reading quiet data inside the overlap writes nothing.
    files = {t: snapshot(lake)[t].version for t in ("spans", "trajectories", "rewards")}
    third = pull_langfuse(lake, config)
    assert (third.observations, third.spans_written, third.trajectories) == (4, 0, 0)
    assert {t: snapshot(lake)[t].version for t in files} == files


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (PullFilters(environments=("production",)), [0, 1, 2, 3, 4]),
        (PullFilters(trace_name="other-agent"), [1]),
        (PullFilters(tags=("prod",)), [1, 2, 4, 5]),
        (PullFilters(user_id="u-1"), [1, 3, 5]),
        (PullFilters(session_id="s-0"), [0, 1]),
        (
            PullFilters(since=datetime.now(UTC) - timedelta(hours=3) + timedelta(minutes=3, seconds=30)),
            [4, 5],
        ),
    ],
)
def test_filters_select_traces_and_their_scores(
    standin: StandinLangfuse,
    seeded: list[str],
    langfuse_url: str,
    lake: Lake,
    filters: PullFilters,
    expected: list[int],
) -> None:
    report = pull_langfuse(lake, make_config(langfuse_url, standin), filters)
    got = [t["trace_id"] for t in sql(lake, "SELECT trace_id FROM trajectories ORDER BY trace_id")]
    assert got == [seeded[i] for i in expected]
    rewarded = {r["trajectory_id"] for r in sql(lake, "SELECT trajectory_id FROM rewards")}
    assert rewarded <= set(got)
    assert report.scope == scope_of(langfuse_url, filters) != f"{langfuse_url}#all"


def test_interrupted_pull_resumes_without_gaps_or_duplicates(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake, tmp_path: Path
) -> None:
    config = make_config(langfuse_url, standin, max_retries=1)
    standin.outage_after(OBS, 2)  # two good pages, then the server goes down
    with pytest.raises(LangfuseUnavailable):
        pull_langfuse(lake, config)
    state = read_state(lake, scope_of(langfuse_url, PullFilters()))
    assert state.phase == "observations" and state.cursor is not None
    assert raw_rows(lake, "spans") == 10  # two checkpointed pages

    standin.restore()
    standin.outage_after(SCORES, 1)  # fails again, now in the scores phase
    with pytest.raises(LangfuseUnavailable):
        pull_langfuse(lake, config)
    assert read_state(lake, state.scope).phase == "scores"

    standin.restore()
    report = pull_langfuse(lake, config)
    assert report.resumed
    assert read_state(lake, state.scope).phase == "idle"
    assert raw_rows(lake, "spans") == 24  # each page read once: no duplicates even on disk
    assert sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 24

    clean = Lake(str(tmp_path / "clean"))
    pull_langfuse(clean, make_config(langfuse_url, standin))
    query = "SELECT trajectory_id, messages, final_output, input_tokens FROM trajectories ORDER BY 1"
    assert sql(lake, query) == sql(clean, query)
    query = "SELECT trajectory_id, name, scorer, value, status FROM rewards ORDER BY 1, 2, 3"
    assert sql(lake, query) == sql(clean, query)


def test_crash_between_spans_and_trajectories_is_repaired_on_resume(
    standin: StandinLangfuse,
    seeded: list[str],
    langfuse_url: str,
    lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = pull_module.assemble_traces
    calls = []

    def crash_on_third(lake_: Lake, trace_ids: set[str]):  # type: ignore[no-untyped-def]
        calls.append(trace_ids)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process dies after writing the spans of checkpoint 3
        return real(lake_, trace_ids)

    monkeypatch.setattr(pull_module, "assemble_traces", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        pull_langfuse(lake, make_config(langfuse_url, standin))
    assert raw_rows(lake, "spans") == 15  # three pages of spans on disk, trajectories for two
    monkeypatch.setattr(pull_module, "assemble_traces", real)

    report = pull_langfuse(lake, make_config(langfuse_url, standin))
    assert report.resumed and report.skipped["observation_unchanged"] == 5
    trajectories = sql(lake, "SELECT * FROM trajectories ORDER BY trace_id")
    assert [t["trace_id"] for t in trajectories] == seeded
    assert all([m["role"] for m in t["messages"]] == ROLES for t in trajectories)


def test_resume_with_an_expired_cursor_rereads_the_window(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake
) -> None:
    config = make_config(langfuse_url, standin, max_retries=0)
    standin.outage_after(OBS, 3)
    with pytest.raises(LangfuseUnavailable):
        pull_langfuse(lake, config)
    standin.restore()
    standin.cursor_epoch += 1  # e.g. a server upgrade: saved cursors are refused with 400
    report = pull_langfuse(lake, config)
    assert report.resumed and any("saved cursor was refused" in p for p in report.problems)
    assert report.skipped["observation_unchanged"] == 15  # the three checkpointed pages, read again
    assert sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 24
    assert raw_rows(lake, "spans") == 24
    assert len(sql(lake, "SELECT * FROM trajectories")) == 6


def test_killed_pull_resumes(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake
) -> None:
    standin.delay_s = 0.3
    env = {
        **os.environ,
        "LANGFUSE_PUBLIC_KEY": standin.public_key,
        "LANGFUSE_SECRET_KEY": standin.secret_key,
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    command = [
        sys.executable,
        "-m",
        "flows.cli",
        "ingest",
        "langfuse",
        "--host",
        langfuse_url,
        "--lake",
        lake.root,
        "--page-size",
        "3",
        "--checkpoint-pages",
        "1",
        "--no-progress",
    ]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    # Killed once its first checkpoint is in the lake, mid-way through the pages.
    while not lake.has_table("spans") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    killed_after = sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"]
    assert killed_after < 24

    standin.delay_s = 0.0
    report = pull_langfuse(lake, make_config(langfuse_url, standin))
    assert sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 24
    trajectories = sql(lake, "SELECT * FROM trajectories ORDER BY trace_id")
    assert [t["trace_id"] for t in trajectories] == seeded
    assert all([m["role"] for m in t["messages"]] == ROLES for t in trajectories)
    assert report.observations + killed_after >= 24


def test_bad_keys_through_the_cli_write_nothing(
    standin: StandinLangfuse, langfuse_url: str, lake: Lake
) -> None:
    env = {"LANGFUSE_PUBLIC_KEY": standin.public_key, "LANGFUSE_SECRET_KEY": "sk-lf-nope"}
    result = cli("ingest", "langfuse", "--host", langfuse_url, "--lake", lake.root, "--no-progress", env=env)
    assert result.exit_code == 1
    assert "rejected the API keys (HTTP 401" in result.output
    assert not any(lake.has_table(t) for t in ("spans", "trajectories", "watermarks"))


def test_missing_keys_are_named(langfuse_url: str, lake: Lake) -> None:
    result = cli("ingest", "langfuse", "--host", langfuse_url, "--lake", lake.root)
    assert result.exit_code == 2 and "LANGFUSE_PUBLIC_KEY" in result.output


def test_a_correction_score_is_the_conversations_label(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, lake: Lake
) -> None:
    """Langfuse's CORRECTION score (the output a trace should have had) becomes a label: the
    scenario cut from that conversation takes it as its expected answer (`expected_source`
    `label`), as `ingest.feedback`'s `correct_answer` does; a TEXT score makes none."""
    standin.add_score(
        id="s-fix",
        name="output_correction",
        dataType="CORRECTION",
        value="It is rainy, 15C in Paris.",
        comment="the tool said 15C",
        timestamp=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        subject={"kind": "trace", "id": seeded[0]},
        source="ANNOTATION",
    )
    result = pull_cli(langfuse_url, standin, lake)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["labels"] == 1

    [label] = sql(lake, "SELECT * FROM labels")
    assert (label["trajectory_id"], label["trace_id"], label["name"]) == (seeded[0], seeded[0], "expected")
    assert json.loads(label["expected"]) == {"final_output": "It is rainy, 15C in Paris."}
    assert (label["source"], label["labeled_by"], label["user_id"]) == (
        "feedback",
        "langfuse:annotation",
        "u-0",
    )
    assert label["comment"] == "the tool said 15C"
    # the reward row is kept as for every score: no number, the correction as its explanation
    [row] = sql(lake, "SELECT value, explanation FROM rewards WHERE name = 'output_correction'")
    assert row == {"value": None, "explanation": "It is rainy, 15C in Paris."}

    made = cli("scenarios", "create", "--lake", lake.root, "--sql", "SELECT trajectory_id FROM trajectories")
    assert made.exit_code == 0, made.output
    scenarios = {
        s["source_trajectory_id"]: s
        for s in sql(lake, "SELECT source_trajectory_id, expected, expected_source FROM scenarios")
    }
    assert scenarios[seeded[0]]["expected_source"] == "label"
    assert json.loads(scenarios[seeded[0]]["expected"]) == {"final_output": "It is rainy, 15C in Paris."}
    assert scenarios[seeded[2]]["expected_source"] is None  # a TEXT review is no right answer
