"""Assembly: spans -> one trajectory per agent run, deduplicated history, tool results, nested and
multi-agent runs, missing, referenced or odd content.

Feedback -> rewards: `test_assemble_feedback.py`; determinism and rebuilding the lake:
`test_assemble_rebuild.py`; the span rows they build: `span_rows.py`.
"""

from __future__ import annotations

import json

from ingest.assembly import assemble
from tests.ingest.span_rows import TRACE, agent, chat, get_span, roles_and_contents, spans_table, text


def test_repeated_history_is_deduplicated_but_a_repeated_user_message_is_kept() -> None:
    h1 = [text("system", "sys"), text("user", "ok")]
    a1 = text("assistant", "sure")
    h2 = [*h1, a1, text("user", "ok")]  # the user really said "ok" twice
    a2 = text("assistant", "done")
    result = assemble(
        spans_table(
            [
                agent("a" * 16, None, "bot", 0),
                chat("b" * 16, "a" * 16, h1, a1, 1),
                chat("c" * 16, "a" * 16, h2, a2, 2),
            ]
        )
    )
    (row,) = result.trajectories.to_pylist()
    assert roles_and_contents(row) == [
        ("system", "sys"),
        ("user", "ok"),
        ("assistant", "sure"),
        ("user", "ok"),
        ("assistant", "done"),
    ]
    assert (row["trajectory_id"], row["agent_name"], row["model"], row["final_output"]) == (
        TRACE,
        "bot",
        "m-1",
        "done",
    )
    assert (row["input_tokens"], row["output_tokens"], row["status"], row["has_content"]) == (
        20,
        6,
        "ok",
        True,
    )


def test_tool_results_come_from_tool_spans_and_failures_are_marked() -> None:
    call = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"k": 1}}],
    }
    rows = [
        agent("a" * 16, None, "bot", 0),
        chat("b" * 16, "a" * 16, [text("user", "find k")], call, 1),
        get_span(
            "d" * 16,
            "a" * 16,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.result": "boom",
            },
            2,
            status="ERROR",
        ),
        # The next chat span does not repeat the tool result (a truncating framework).
        chat("e" * 16, "a" * 16, [text("user", "find k")], text("assistant", "it failed"), 3),
    ]
    (row,) = assemble(spans_table(rows)).trajectories.to_pylist()
    tool = [m for m in row["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and tool[0]["tool_call_id"] == "c1" and tool[0]["name"] == "lookup"
    assert tool[0]["is_error"] is True and tool[0]["content"] == "boom"
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_multi_agent_trace_gives_one_trajectory_per_agent_run() -> None:
    rows = [
        get_span("0" * 16, None, {}, 0, name="POST /chat"),
        agent("a" * 16, "0" * 16, "planner", 1),
        chat("b" * 16, "a" * 16, [text("user", "plan")], text("assistant", "p"), 2),
        # Nested, with a conversation of its own (its own system prompt): its own run, parent = planner's.
        agent("c" * 16, "a" * 16, "researcher", 3),
        chat(
            "d" * 16,
            "c" * 16,
            [text("system", "You research."), text("user", "research")],
            text("assistant", "r"),
            4,
        ),
        agent("e" * 16, "0" * 16, "writer", 5),  # a second top-level agent
        chat("f" * 16, "e" * 16, [text("user", "write")], text("assistant", "w"), 6),
    ]
    result = assemble(spans_table(rows))
    by_agent = {r["agent_name"]: r for r in result.trajectories.to_pylist()}
    assert set(by_agent) == {"planner", "researcher", "writer"}
    assert by_agent["planner"]["trajectory_id"] == f"{TRACE}:{'a' * 16}"
    assert by_agent["researcher"]["trajectory_id"] == f"{TRACE}:{'c' * 16}"
    assert json.loads(by_agent["researcher"]["metadata"])["parent_trajectory_id"] == f"{TRACE}:{'a' * 16}"
    assert roles_and_contents(by_agent["planner"]) == [("user", "plan"), ("assistant", "p")]
    assert roles_and_contents(by_agent["researcher"])[0] == ("system", "You research.")
    assert roles_and_contents(by_agent["writer"]) == [("user", "write"), ("assistant", "w")]
    assert {r["trace_id"] for r in by_agent.values()} == {TRACE}


def test_nested_agent_spans_of_one_conversation_are_one_run() -> None:
    # LangGraph: the graph is the agent; each pass through its `agent` node is an AGENT span too,
    # with one model call of the same conversation. One run, named after the graph.
    history = [text("system", "Be brief."), text("user", "q")]
    rows = [
        agent("a" * 16, None, "weather-graph", 0),
        agent("b" * 16, "a" * 16, "agent", 1),
        chat("c" * 16, "b" * 16, history, text("assistant", "first"), 2),
        agent("d" * 16, "a" * 16, "agent", 3),
        chat(
            "e" * 16,
            "d" * 16,
            [*history, text("assistant", "first"), text("user", "more")],
            text("assistant", "second"),
            4,
        ),
    ]
    (row,) = assemble(spans_table(rows)).trajectories.to_pylist()
    assert row["trajectory_id"] == TRACE and row["agent_name"] == "weather-graph"
    assert [c for _, c in roles_and_contents(row)] == ["Be brief.", "q", "first", "more", "second"]
    assert json.loads(row["metadata"])["llm_calls"] == 2


def test_contentless_trace_still_yields_a_trajectory_marked_so() -> None:
    rows = [
        get_span(
            "a" * 16,
            None,
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 5},
            0,
        )
    ]
    (row,) = assemble(spans_table(rows)).trajectories.to_pylist()
    # The model's turn is known, its content is not: the structure is kept, nothing invented.
    assert row["has_content"] is False and row["input_tokens"] == 5
    assert [(m["role"], m["content"], m["tool_calls"]) for m in row["messages"]] == [("assistant", None, [])]


def test_trace_without_its_root_is_marked_truncated_and_non_llm_traces_are_skipped() -> None:
    rows = [
        chat("b" * 16, "f" * 16, [text("user", "q")], text("assistant", "a"), 1),
        get_span("c" * 16, None, {"http.method": "GET"}, 0, trace_id="1" * 32),
    ]
    result = assemble(spans_table(rows))
    assert [r["status"] for r in result.trajectories.to_pylist()] == ["truncated"]
    assert result.skipped == {"no_llm_calls": 1}


def test_content_stored_elsewhere_is_referenced_not_silently_empty() -> None:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.input.messages.ref": "s3://telemetry/in/0af7.json",
        "gen_ai.output.messages.ref": "s3://telemetry/out/0af7.json",
        "gen_ai.usage.input_tokens": 7,
    }
    rows = [
        get_span(
            "a" * 16, None, {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "wf"}, 0
        ),
        get_span("b" * 16, "a" * 16, attrs, 1),
    ]
    (row,) = assemble(spans_table(rows)).trajectories.to_pylist()
    metadata = json.loads(row["metadata"])
    assert row["has_content"] is False and metadata["content"] == "referenced"
    assert metadata["content_refs"] == [
        {
            "span_id": "b" * 16,
            "input.messages": "s3://telemetry/in/0af7.json",
            "output.messages": "s3://telemetry/out/0af7.json",
        }
    ]
    assert row["agent_name"] == "wf"  # invoke_workflow is the older name of an agent span


def test_unbounded_sampling_parameters_are_null_in_valid_json() -> None:
    rows = [
        chat(
            "a" * 16,
            None,
            [text("user", "q")],
            text("assistant", "a"),
            0,
            **{"gen_ai.request.max_tokens": "Infinity"},  # as Langfuse sends an unbounded limit
        ),
    ]
    (row,) = assemble(spans_table(rows)).trajectories.to_pylist()
    assert "Infinity" not in row["metadata"]
    assert json.loads(row["metadata"])["params"] == {"max_tokens": None}
