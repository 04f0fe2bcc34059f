"""The acceptance path: real instrumentation libraries -> real OTLP/HTTP -> `trajlake collect` -> SQL.

Each library runs the same two-turn tool-using conversation against the scripted
OpenAI-compatible server, in its own interpreter (instrumentors patch `openai`
globally), exporting with the real OTLP/HTTP exporter, with and without gzip. The
result must be ONE trajectory holding every message, the tool definitions and the
model, read back through `trajlake sql` on `trajectories` and `messages`. The collector
is the real command (`trajlake collect`) running as its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from store.lake import Lake
from tests.ingest.conftest import sql, wait_for
from tests.ingest.fake_openai import (
    FINAL_ANSWER,
    MODEL,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    create_app,
    free_port,
    serve_in_thread,
)

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_KEY, SECRET_KEY = "pk-lf-test", "sk-lf-test"


@dataclass
class CollectProcess:
    url: str
    lake: Lake


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectProcess]:
    """`trajlake collect` as a subprocess, shared by this module's tests (queries filter by trace id)."""
    lake = Lake(str(tmp_path_factory.mktemp("real-clients") / "lake"))
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "flows.cli",
        "collect",
        "--lake",
        lake.root,
        "--port",
        str(port),
        "--flush-seconds",
        "0.2",
        "--idle-timeout",
        "2",
        "--langfuse-public-key",
        PUBLIC_KEY,
        "--langfuse-secret-key",
        SECRET_KEY,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRAJLAKE_"))}
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, timeout=60, interval=0.2)
    yield CollectProcess(url, lake)
    process.terminate()
    process.wait(timeout=60)


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
            "tests.e2e.agent_script",
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
    # may arrive after the spans, and re-assembles the trace when it does. A fresh lake has no
    # tables until the collector's first commit (acknowledged spans wait in its spool until then),
    # and `trajlake sql` refuses a lake without tables.
    query = f"SELECT * FROM trajectories WHERE trace_id = '{trace_id}'"
    wait_for(
        lambda: lake.has_table("trajectories") and [r for r in sql(lake, query) if r["final_output"]],
        timeout=30,
    )
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


def test_langfuse_sdk_yields_one_full_trajectory_and_its_scores(
    openai_url: str, collector: CollectProcess
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.e2e.langfuse_agent_script",
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
    # An unmapped categorical label is a failed reward that keeps its label, never a made-up number.
    tone = rewards["tone"]
    assert tone["value"] is None and tone["status"] == "failed" and tone["error"] == "unmapped_category"
    assert json.loads(tone["metadata"])["label"] == "friendly"


def test_langfuse_sdk_with_wrong_keys_gets_401_and_nothing_is_written(
    openai_url: str, collector: CollectProcess
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.e2e.langfuse_agent_script",
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
    trace_id = done.stdout.strip().splitlines()[-1]
    health = httpx.get(f"{collector.url}/health").json()
    wait_for(lambda: httpx.get(f"{collector.url}/health").json()["pending_bytes"] == 0)
    assert health["errors"] >= 1  # the refused requests
    for table in ("spans", "rewards"):
        column = "trace_id" if table == "spans" else "trajectory_id"
        if collector.lake.has_table(table):
            assert sql(
                collector.lake, f"SELECT count(*) AS n FROM {table} WHERE {column} = '{trace_id}'"
            ) == [{"n": 0}]
