"""Replay each recording into the real collector and compare its trajectory with expected/<config>.json.

    python -m tests.ingest.frameworks.check_corpus [NAME ...] [--verbose]

A diagnosis, not a test (the name keeps pytest away): for every configuration it starts the
project's collector in-process (`ingest.collector.create_app`, served by uvicorn on loopback
with its lifespan, so stopping it flushes and assembles everything), POSTs every recorded
body to the recorded path with the recorded Content-Type / Content-Encoding, stops it, reads
`trajectories` and `rewards` through `store.connect(lake)`, and prints per configuration
`OK` or every field that differs (`field: got ... expected ...`). Requests the collector did
not answer 200 are listed too (e.g. `/v1/metrics`, which it does not serve).

Run from the repository root so `ingest`/`store` are this checkout's.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

import store
from ingest.otlp.app import create_app
from ingest.otlp.config import CollectorConfig
from store import Lake
from tests.ingest.fake_openai import serve_in_thread

HERE = Path(__file__).resolve().parent


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
    con = store.connect(lake)
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
        results = [m for m in messages if m["role"] == "tool"]
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
    return diffs


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    names = args or sorted(p.stem for p in (HERE / "expected").glob("*.json"))
    failing = 0
    with tempfile.TemporaryDirectory(prefix="trajlake-corpus-") as tmp:
        for name in names:
            expected = json.loads((HERE / "expected" / f"{name}.json").read_text())
            try:
                rows, rewards, answers = replay(name, Path(tmp))
                diffs = compare(expected, rows, rewards)
            except Exception as exc:
                answers, diffs = [], [f"replay failed: {type(exc).__name__}: {exc}"]
            if diffs:
                failing += 1
            print(f"{name}: {'OK' if not diffs else f'{len(diffs)} difference(s)'}")
            for line in answers:
                print(f"    collector answered {line}")
            for line in diffs:
                print(f"    {line}")
    print(f"{len(names) - failing} OK, {failing} with differences")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
