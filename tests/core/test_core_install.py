"""The core install (`pip install trajlake`, no extras: no torch, TRL or Prefect) runs the collector,
`sql`, `forget` and the report, and a command of a missing extra says which one to install.

Run with the interpreter `.ci/core-env` builds: `.venv-core/bin/python -m pytest -m core tests/core`.
Every command runs as the user runs it, a `python -m flows.cli` process of that interpreter;
the collector receives a real OTLP/HTTP POST on loopback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from store.lake import Lake
from store.rows import utc_now
from store.writer import write

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("torch", "transformers", "trl", "peft", "prefect", "accelerate", "datasets")

pytestmark = [
    pytest.mark.core,
    # The marker keeps these out of the full environment's run (`-m "not vllm and not core"`);
    # run there by hand, they would fail on what they check, so they say where they belong.
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) for m in EXTRAS),
        reason="needs the core install alone: `.ci/core-env`, then `.venv-core/bin/python -m pytest -m core tests/core`",
    ),
]

USER = "user-of-the-core-test"
USERS_TRACE, OTHERS_TRACE = "a1" * 16, "b2" * 16


def trajlake(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sql(lake: Lake, query: str) -> list[dict[str, object]]:
    result = trajlake("sql", "--lake", lake.root, "--format", "json", query)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def otlp_request(trace: str, user: str) -> bytes:
    """A chat turn of `user`, as an OTel GenAI instrumentation exports it (protobuf)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    attribute = resource.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "shop"
    span = resource.scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex(trace), bytes.fromhex("0" * 15 + "1")
    span.name = "chat gpt-test"
    span.start_time_unix_nano, span.end_time_unix_nano = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000
    for key, value in {
        "user.id": user,
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]
        ),
    }.items():
        kv = span.attributes.add()
        kv.key, kv.value.string_value = key, value
    return request.SerializeToString()


def test_the_core_install_has_no_trainer_or_prefect_library() -> None:
    assert [m for m in EXTRAS if importlib.util.find_spec(m)] == []


@pytest.mark.parametrize(
    ("command", "extras"),
    [
        (["train", "sft", "--help"], "train"),
        (["tiny-model", "model"], "train"),
        (["pipeline"], "train,flows"),
    ],
)
def test_a_command_of_a_missing_extra_exits_2_naming_it(command: list[str], extras: str) -> None:
    result = trajlake(*command)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"pip install 'trajlake[{extras}]'" in lines[0] and f"`trajlake {command[0]}`" in lines[0]


def test_collect_then_sql_then_forget_on_the_core_install(lake: Lake) -> None:
    port = free_port()
    collector = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "collect", "--lake", lake.root, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert collector.poll() is None, collector.stderr.read().decode() if collector.stderr else ""
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the collector did not answer /health in 120 s"
                time.sleep(0.2)
        for trace, user in ((USERS_TRACE, USER), (OTHERS_TRACE, "someone-else")):
            response = httpx.post(
                f"{url}/v1/traces",
                content=otlp_request(trace, user),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=30,
            )
            assert response.status_code == 200, response.text
    finally:
        collector.send_signal(signal.SIGTERM)  # a graceful stop flushes the spool into the lake
        assert collector.wait(timeout=120) == 0, collector.stderr.read().decode() if collector.stderr else ""

    conversations = sql(lake, "SELECT trace_id, user_id, final_output FROM trajectories ORDER BY trace_id")
    assert conversations == [
        {"trace_id": USERS_TRACE, "user_id": USER, "final_output": "4"},
        {"trace_id": OTHERS_TRACE, "user_id": "someone-else", "final_output": "4"},
    ]

    result = trajlake("forget", "--user-id", USER, "--yes", "--lake", lake.root)
    assert result.returncode == 0, result.stderr
    assert sql(lake, "SELECT trace_id FROM spans") == [{"trace_id": OTHERS_TRACE}]
    assert sql(lake, "SELECT user_id FROM trajectories") == [{"user_id": "someone-else"}]
    assert sql(lake, "SELECT verified FROM erasures") == [{"verified": True}]


def test_the_report_on_the_core_install(lake: Lake, tmp_path: Path) -> None:
    now = utc_now()
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    write(
        lake,
        "trajectories",
        [
            {
                "trajectory_id": f"t{i}",
                "source": "replay",
                "started_at": now,
                "group_id": f"g{i // 4}",
                "policy": "base",
            }
            for i in range(len(values))
        ],
    )
    write(
        lake,
        "rewards",
        [
            {"trajectory_id": f"t{i}", "name": "exact_match", "scorer": "f@1", "value": v, "scored_at": now}
            for i, v in enumerate(values)
        ],
    )
    out = tmp_path / "report.html"
    result = trajlake("report", "--lake", lake.root, "--out", str(out))
    assert result.returncode == 0, result.stderr
    html = out.read_text(encoding="utf-8")
    assert "exact_match" in html and "data:image/png;base64," in html  # matplotlib's plot, embedded


def test_the_langfuse_import_on_the_core_install(lake: Lake, tmp_path: Path) -> None:
    records = [
        {
            "id": "lf-trace",
            "timestamp": "2026-11-20T10:00:00Z",
            "name": "shop-agent",
            "userId": "lf-user",
            "sessionId": "lf-session",
            "input": "2+2?",
            "output": "4",
        },
        {
            "id": "lf-generation",
            "traceId": "lf-trace",
            "type": "GENERATION",
            "name": "chat",
            "startTime": "2026-11-20T10:00:00Z",
            "endTime": "2026-11-20T10:00:01Z",
            "model": "gpt-test",
            "input": [{"role": "user", "content": "2+2?"}],
            "output": {"role": "assistant", "content": "4"},
        },
        {
            "id": "lf-score",
            "traceId": "lf-trace",
            "name": "thumbs",
            "value": 1,
            "dataType": "NUMERIC",
            "timestamp": "2026-11-20T10:00:02Z",
        },
    ]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = trajlake("ingest", "langfuse", "--file", str(export), "--lake", lake.root, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert sql(lake, "SELECT source, user_id, final_output FROM trajectories") == [
        {"source": "langfuse", "user_id": "lf-user", "final_output": "4"}
    ]
    assert sql(lake, "SELECT name, value FROM rewards") == [{"name": "thumbs", "value": 1.0}]
