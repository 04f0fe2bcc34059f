"""Replay a recording into the real collector and compare its trajectory with `expected/<config>.json`.

Used by the corpus tests (`tests/ingest/frameworks/test_frameworks.py`) and the diagnosis script
(`check_corpus`): the project's collector runs in-process, served by uvicorn on loopback
with its lifespan (stopping it flushes and assembles everything); every recorded body is
POSTed to its recorded path with its recorded Content-Type / Content-Encoding; then
`trajectories` and `rewards` are read through `store.catalog.connection.connect`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from ingest.otlp.app import create_app
from ingest.otlp.config import CollectorConfig
from store.catalog.connection import connect
from store.lake import Lake
from tests.ingest.fake_openai import serve_in_thread

HERE = Path(__file__).resolve().parent


def configurations() -> list[str]:
    """Every recorded configuration with an expected trajectory."""
    return sorted(p.stem for p in (HERE / "expected").glob("*.json"))


def expected_of(name: str) -> dict[str, Any]:
    expected = json.loads((HERE / "expected" / f"{name}.json").read_text())
    exchanges = json.loads((HERE / "recordings" / name / "llm_exchanges.json").read_text())
    expected["llm_calls"] = len(exchanges)  # every request the scripted model received
    return expected


def replay(name: str, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    folder = HERE / "recordings" / name
    manifest = json.loads((folder / "manifest.json").read_text())
    lake = Lake(str(root / name / "lake"))
    config = CollectorConfig(lake=lake.root, flush_seconds=0.2, idle_timeout_s=1.0, assemble_interval_s=0.1)
    answers = []
    with serve_in_thread(create_app(config)) as url, httpx.Client(timeout=30) as client:
        for entry in manifest["requests"]:
            if entry["method"] != "POST" or not entry["body_file"]:
                continue
            headers = {}
            if entry["content_type"]:
                headers["Content-Type"] = entry["content_type"]
            if entry["content_encoding"]:
                headers["Content-Encoding"] = entry["content_encoding"]
            response = client.post(
                url + entry["path"], content=(folder / entry["body_file"]).read_bytes(), headers=headers
            )
            if not 200 <= response.status_code < 300:
                answers.append(f"{entry['body_file']}: {response.status_code} {response.text[:120]!r}")
    trajectories: list[dict[str, Any]] = []
    rewards: list[dict[str, Any]] = []
    con = connect(lake)
    for table, out in (("trajectories", trajectories), ("rewards", rewards)):
        if not lake.has_table(table):
            continue
        cursor = con.execute(f"SELECT * FROM {table}")
        columns = [d[0] for d in cursor.description]
        out.extend(dict(zip(columns, row, strict=True)) for row in cursor.fetchall())
    return trajectories, rewards, answers


def short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[:width] + "..."


def compare(expected: dict[str, Any], rows: list[dict[str, Any]], rewards: list[dict[str, Any]]) -> list[str]:
    diffs: list[str] = []
    if len(rows) != expected["trajectories"]:
        described = [
            f"{r['trajectory_id'][:8]}:{len(r['messages'] or [])}msgs/{r['agent_name']}/{r['status']}"
            for r in rows
        ]
        diffs.append(f"trajectories: got {len(rows)} {described} expected {expected['trajectories']}")
    if not rows:
        return diffs
    row = max(rows, key=lambda r: (r["final_output"] is not None, len(r["messages"] or [])))
    messages = row["messages"] or []

    def check(field: str, got: Any, want: Any) -> None:
        if got != want:
            diffs.append(f"{field}: got {short(got)} expected {short(want)}")

    check("source", row["source"], expected["source"])
    check("roles", [m["role"] for m in messages], expected["roles"])
    want_messages = expected["messages"]
    for index, (got, want) in enumerate(zip(messages, want_messages, strict=False)):
        if got["role"] != want["role"]:
            break
        if want["role"] in ("system", "user") and got["content"] != want["content"]:
            check(f"messages[{index}].content", got["content"], want["content"])
    calls = [c for m in messages for c in (m.get("tool_calls") or [])]
    want_call = expected["tool_call"]
    weather_calls = [c for c in calls if c["name"] == want_call["name"]]
    if not weather_calls:
        diffs.append(f"tool_call: none named {want_call['name']} (calls: {short(calls)})")
    else:
        call = weather_calls[0]
        check("tool_call.id", call["id"], want_call["id"])
        try:
            arguments = json.loads(call["arguments"]) if call["arguments"] else None
        except ValueError:
            arguments = call["arguments"]
        check("tool_call.arguments", arguments, want_call["arguments"])
    if expected["tool_result"] is not None:
        results = [
            m
            for m in messages
            if m["role"] == "tool"
            or (m["role"] == "user" and (m.get("content") or "").startswith("Observation:"))
        ]
        if not results:
            diffs.append(f"tool_result: no tool message (expected {short(expected['tool_result'])})")
        else:
            if expected["tool_result"]["content"] is not None:  # None: content-free run or an error text
                check("tool_result.content", results[0]["content"], expected["tool_result"]["content"])
            if expected["tool_result"].get("is_error"):
                check("tool_result.is_error", results[0]["is_error"], True)
            if expected["tool_result"]["tool_call_id"]:
                check(
                    "tool_result.tool_call_id",
                    results[0]["tool_call_id"],
                    expected["tool_result"]["tool_call_id"],
                )
    check("final_output", row["final_output"], expected["final_output"])
    check("input_tokens", row["input_tokens"], expected["input_tokens"])
    check("output_tokens", row["output_tokens"], expected["output_tokens"])
    check("model", row["model"], expected["model"])
    check("agent_name", row["agent_name"], expected["agent_name"])
    check("session_id", row["session_id"], expected["session_id"])
    check("user_id", row["user_id"], expected["user_id"])
    check("status", row["status"], expected["status"])
    check("has_content", row["has_content"], expected["has_content"])
    tools = json.loads(row["tools"]) if row["tools"] else []
    got_tools = {}
    for t in tools:
        f = t.get("function") or t
        got_tools[f.get("name")] = f
    for want in expected["tools"]:
        got = got_tools.get(want["name"])
        if got is None:
            diffs.append(f"tools: {want['name']} missing (got {sorted(got_tools)})")
            continue
        if want.get("parameters") is None:  # not in the telemetry: nothing to compare
            continue
        parameters = got.get("parameters") or {}
        want_parameters = want.get("parameters") or {}
        check(
            f"tools.{want['name']}.parameters",
            (sorted(parameters.get("properties") or {}), parameters.get("required")),
            (sorted(want_parameters.get("properties") or {}), want_parameters.get("required")),
        )
        if not got.get("description"):
            diffs.append(
                f"tools.{want['name']}.description: missing (expected {short(want['description'], 60)})"
            )
    check("rewards", sorted(r["name"] for r in rewards), sorted(expected["scores"]))
    metadata = json.loads(row["metadata"] or "{}")
    check("metadata.llm_calls", metadata.get("llm_calls"), expected["llm_calls"])
    reasons = metadata.get("finish_reasons") or []
    if reasons and len(reasons) != expected["llm_calls"]:
        diffs.append(f"metadata.finish_reasons: got {reasons}, not one per model call")
    return diffs
