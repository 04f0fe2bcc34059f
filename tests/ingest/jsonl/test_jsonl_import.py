"""`trajlake ingest jsonl`: chat-format conversations from files become `source = 'import'`
trajectories that SFT, scenarios and `policy_performance` read; a bad line writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from training.replay.scenario_io import create_scenarios
from training.replay.scenarios import ScenarioConfig

CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
LINES = [
    {
        "id": "a1",
        "model": "gpt-x",
        "started_at": "2026-11-20T10:00:00Z",
        "metadata": {"team": "support"},
        "feedback": 1,
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+3? key AKIAIOSFODNN7EXAMPLE"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "5"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "5."}],
            },
        ],
    },
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
]


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    return path


def ingest(lake: Lake, *files: Path) -> object:
    return CliRunner().invoke(app, ["ingest", "jsonl", *map(str, files), "--lake", lake.root])


def test_conversations_become_trajectories(lake: Lake, tmp_path: Path) -> None:
    result = ingest(lake, write(tmp_path / "a.jsonl", LINES))
    assert result.exit_code == 0, result.output
    assert "imported 2 conversations" in result.output and "1 with feedback" in result.output
    con = connect(lake)
    row = con.execute(
        "SELECT source, model, final_output, tools, metadata, started_at, messages FROM trajectories "
        "WHERE trajectory_id = 'import-a1'"
    ).fetchone()
    source, model, final, tools, metadata, started, messages = row
    assert (source, model, final) == ("import", "gpt-x", "It is 5.")
    assert json.loads(tools) == TOOLS and json.loads(metadata) == {"team": "support"}
    assert started.isoformat().startswith("2026-11-20T10:00:00")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert (
        "AKIA" not in messages[1]["content"] and "[REDACTED" in messages[1]["content"]
    )  # the collector's rules
    assert messages[2]["tool_calls"][0] == {
        "id": "c1",
        "name": "calculator",
        "arguments": '{"expression": "2+3"}',
    }
    assert messages[3]["tool_call_id"] == "c1" and messages[3]["name"] == "calculator"
    feedback = con.execute("SELECT policy, name, trajectories, mean FROM policy_performance").fetchall()
    assert feedback == [("gpt-x", "user_feedback", 1, 1.0)]  # imported traffic counts as production

    again = ingest(lake, tmp_path / "a.jsonl")  # re-importing changes nothing
    assert again.exit_code == 0
    assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 2

    cut = create_scenarios(
        lake, "SELECT trajectory_id FROM trajectories WHERE source = 'import'", ScenarioConfig()
    )
    assert sum(cut.splits.values()) == 2  # scenarios are cut from imported conversations too


def test_a_bad_line_writes_nothing_and_says_where(lake: Lake, tmp_path: Path) -> None:
    good = write(tmp_path / "good.jsonl", LINES)
    for bad, why in (
        ([{"messages": [{"role": "robot", "content": "x"}]}], "`messages[0].role` is 'robot'"),
        ([{"messages": []}], "`messages` must be a non-empty list"),
        ([{"messages": [{"role": "user", "content": "x"}], "score": 1}], "unknown field `score`"),
        ([["not", "an", "object"]], "must be a JSON object"),
    ):
        path = write(tmp_path / "bad.jsonl", [LINES[1], *bad])
        result = ingest(lake, good, path)
        assert result.exit_code == 2
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and f"{path}:2" in lines[0] and why in lines[0]
        assert not (Path(lake.root) / "trajectories").exists()  # nothing of the good file either
