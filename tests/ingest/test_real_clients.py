"""The acceptance path: real instrumentation libraries -> real OTLP/HTTP -> running collector -> SQL.

Each library runs the same two-turn tool-using conversation against the scripted
OpenAI-compatible server, in its own interpreter (instrumentors patch `openai`
globally), exporting with the real OTLP/HTTP exporter, with and without gzip. The
result must be ONE trajectory holding every message, the tool definitions and the
model, read back through `trajlake sql` on `trajectories` and `messages`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ingest.conftest import sql, wait_for
from tests.ingest.fake_openai import (
    FINAL_ANSWER,
    MODEL,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    create_app,
    serve_in_thread,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def openai_url() -> Iterator[str]:
    with serve_in_thread(create_app()) as url:
        yield url


def run_agent_process(library: str, openai_url: str, collector_url: str, gzip: bool) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_BLRP_SCHEDULE_DELAY": "100",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.ingest.agent_script",
            library,
            openai_url,
            collector_url,
            "1" if gzip else "0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def check_trajectory(lake, trace_id: str, *, expect_tools: bool = True) -> None:  # type: ignore[no-untyped-def]
    # Wait for the final assembly: content carried by log records (the deprecated events)
    # may arrive after the spans, and re-assembles the trace when it does.
    query = f"SELECT * FROM trajectories WHERE trace_id = '{trace_id}'"
    wait_for(lambda: [r for r in sql(lake, query) if r["final_output"]], timeout=30)
    rows = sql(lake, query)
    assert len(rows) == 1, rows  # ONE trajectory for the whole two-turn conversation
    row = rows[0]
    assert row["trajectory_id"] == trace_id
    assert row["model"] == MODEL
    assert row["agent_name"] == "weather-agent"
    assert row["session_id"] == "conv-42" and row["user_id"] == "user-7"
    assert row["final_output"] == FINAL_ANSWER
    assert (row["input_tokens"], row["output_tokens"]) == (110, 21)
    assert row["has_content"] is True and row["status"] == "ok"
    tools = json.loads(row["tools"])
    assert [t["function"]["name"] for t in tools] == ["get_weather"]
    assert tools[0]["function"]["parameters"]["required"] == ["city"]

    messages = sql(
        lake,
        f"SELECT position, role, content, name, tool_call_id, tool_calls, is_error FROM messages "
        f"WHERE trajectory_id = '{trace_id}' ORDER BY position",
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "You are a weather assistant."
    assert messages[1]["content"] == "What is the weather in Paris?"
    call = messages[2]["tool_calls"]
    assert len(call) == 1 and call[0]["id"] == TOOL_CALL_ID and call[0]["name"] == "get_weather"
    assert json.loads(call[0]["arguments"]) == json.loads(TOOL_ARGUMENTS)
    tool = messages[3]
    assert (
        tool["tool_call_id"] == TOOL_CALL_ID and tool["name"] == "get_weather" and tool["is_error"] is False
    )
    assert json.loads(tool["content"])["weather"] == "rainy"
    assert messages[4]["content"] == FINAL_ANSWER


@pytest.mark.parametrize(
    ("library", "gzip"),
    [("openai-v2", True), ("openai-v2-events", False), ("openinference", False), ("openllmetry", True)],
)
def test_library_yields_one_full_trajectory(library: str, gzip: bool, openai_url: str, collector) -> None:  # type: ignore[no-untyped-def]
    trace_id = run_agent_process(library, openai_url, collector.url, gzip)
    check_trajectory(collector.lake, trace_id)
    spans = sql(
        collector.lake, f"SELECT count(*) AS n FROM spans WHERE trace_id = '{trace_id}' AND kind != 'LOG'"
    )
    names = sql(collector.lake, f"SELECT name, kind, parent_span_id FROM spans WHERE trace_id = '{trace_id}'")
    assert spans[0]["n"] == 4, names  # agent, two chat calls, one tool execution


def test_langfuse_sdk_yields_one_full_trajectory_and_its_scores(openai_url: str, start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(langfuse_public_key="pk-lf-test", langfuse_secret_key="sk-lf-test")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.ingest.langfuse_agent_script",
            openai_url,
            collector.url,
            "pk-lf-test",
            "sk-lf-test",
            "check",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trace_id = done.stdout.strip().splitlines()[-1]
    check_trajectory(collector.lake, trace_id)
    assert sql(collector.lake, f"SELECT source FROM trajectories WHERE trace_id = '{trace_id}'") == [
        {"source": "langfuse"}
    ]
    rewards = {
        r["name"]: r for r in sql(collector.lake, f"SELECT * FROM rewards WHERE trajectory_id = '{trace_id}'")
    }
    assert rewards["user_feedback"]["value"] == 1.0 and rewards["user_feedback"]["explanation"] == "thumbs up"
    assert rewards["tone"]["value"] is None and json.loads(rewards["tone"]["metadata"])["label"] == "friendly"


def test_langfuse_sdk_with_wrong_keys_gets_401_and_nothing_is_written(
    openai_url: str, start_collector
) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(langfuse_public_key="pk-lf-test", langfuse_secret_key="sk-lf-test")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.ingest.langfuse_agent_script",
            openai_url,
            collector.url,
            "pk-lf-test",
            "wrong",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "401" in done.stderr
    collector.runtime.flush()
    assert collector.runtime.stats.rows_accepted == 0
    assert not collector.lake.data_files("spans") and not collector.lake.data_files("rewards")
