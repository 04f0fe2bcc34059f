"""Assembly: spans -> one trajectory per agent run, deduplicated history, tool results, feedback, determinism."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner

import store
from flows.cli import app as cli_app
from ingest.assembly import assemble
from ingest.otlp.convert import ROW_SCHEMA
from store.schema import REWARDS, TRAJECTORIES

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
TRACE = "0af7651916cd43dd8448eb211c80319c"


def get_span(
    span_id: str,
    parent: str | None,
    attrs: dict[str, Any],
    t: int,
    *,
    name: str = "span",
    events: list[dict[str, Any]] | None = None,
    kind: str = "INTERNAL",
    status: str = "UNSET",
    trace_id: str = TRACE,
) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "kind": kind,
        "source": "otel",
        "start_time": T0 + timedelta(seconds=t),
        "end_time": T0 + timedelta(seconds=t, milliseconds=500),
        "status_code": status,
        "attributes": json.dumps(attrs),
        "events": json.dumps(events or []),
        "service_name": "svc",
        "resource": "{}",
    }


def spans_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ROW_SCHEMA)


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def chat(
    span_id: str,
    parent: str | None,
    history: list[dict[str, Any]],
    answer: dict[str, Any],
    t: int,
    **extra: Any,
) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m-1",
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps([answer]),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        **extra,
    }
    return get_span(span_id, parent, attrs, t, name="chat m", kind="CLIENT")


def agent(span_id: str, parent: str | None, name: str, t: int) -> dict[str, Any]:
    return get_span(
        span_id,
        parent,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
        t,
        name=f"invoke_agent {name}",
    )


def roles_and_contents(row: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(m["role"], m["content"]) for m in row["messages"]]


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


def test_feedback_events_logs_and_annotations_become_rewards() -> None:
    evaluation = {
        "name": "gen_ai.evaluation.result",
        "time": int((T0 + timedelta(seconds=9)).timestamp() * 1e9),
        "attributes": {
            "gen_ai.evaluation.name": "relevance",
            "gen_ai.evaluation.score.value": 0.8,
            "gen_ai.evaluation.explanation": "on topic",
        },
    }
    log_row = get_span(
        "9" * 16,
        "b" * 16,
        {"log.body": {"gen_ai.evaluation.name": "thumbs", "gen_ai.evaluation.score.label": "up"}},
        8,
        name="gen_ai.evaluation.result",
        kind="LOG",
    )
    rows = [
        agent("a" * 16, None, "bot", 0),
        {
            **chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
            "events": json.dumps([evaluation]),
        },
        get_span(
            "c" * 16,
            "a" * 16,
            {
                "openinference.span.kind": "EVALUATOR",
                "annotation.name": "correct",
                "annotation.score": 1,
                "annotation.explanation": "matches",
            },
            2,
        ),
        log_row,
    ]
    rewards = {r["name"]: r for r in assemble(spans_table(rows)).rewards.to_pylist()}
    assert set(rewards) == {"relevance", "thumbs", "correct"}
    assert all(r["trajectory_id"] == TRACE for r in rewards.values())
    assert (rewards["relevance"]["value"], rewards["relevance"]["explanation"]) == (0.8, "on topic")
    assert rewards["relevance"]["scorer"] == "otel:gen_ai.evaluation.result"
    assert rewards["thumbs"]["value"] is None and json.loads(rewards["thumbs"]["metadata"])["label"] == "up"
    assert (rewards["correct"]["value"], rewards["correct"]["scorer"]) == (1.0, "openinference:annotation")


def test_non_finite_feedback_values_are_stored_without_a_number() -> None:
    evaluation = {
        "name": "gen_ai.evaluation.result",
        "time": int((T0 + timedelta(seconds=9)).timestamp() * 1e9),
        "attributes": {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": "NaN"},
    }
    rows = [
        agent("a" * 16, None, "bot", 0),
        {
            **chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
            "events": json.dumps([evaluation]),
        },
    ]
    (reward,) = assemble(spans_table(rows)).rewards.to_pylist()
    assert reward["name"] == "relevance" and reward["value"] is None  # NaN would poison every mean
    assert json.loads(reward["metadata"])["raw_value"] == "NaN"


def test_assembly_is_deterministic_and_in_the_lake_schemas(lake: store.Lake) -> None:
    rows = [
        agent("a" * 16, None, "bot", 0),
        chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
        chat(
            "c" * 16,
            "a" * 16,
            [text("user", "q"), text("assistant", "a"), text("user", "q2")],
            text("assistant", "a2"),
            2,
        ),
    ]
    first = assemble(spans_table(rows))
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    second = assemble(spans_table(shuffled))
    assert first.trajectories.equals(second.trajectories) and first.rewards.equals(second.rewards)
    assert first.trajectories.schema == TRAJECTORIES.schema and first.rewards.schema == REWARDS.schema

    # `trajlake assemble` rebuilds the same rows from the stored spans.
    store.write(lake, "spans", spans_table(rows))
    result = CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "1 trajectories" in result.stdout
    stored = store.connect(lake).sql("SELECT * EXCLUDE (_written_at) FROM trajectories").to_arrow_table()
    expected = first.trajectories.drop_columns(["_written_at"])
    assert stored.to_pylist() == expected.to_pylist()


def test_rebuild_streams_traces_in_batches_and_filters(lake: store.Lake) -> None:
    from ingest.lakeio import rebuild

    rows = []
    for n in range(5):
        trace = f"{n:032x}"
        rows += [
            {**agent("a" * 16, None, f"bot{n}", n), "trace_id": trace},
            {
                **chat("b" * 16, "a" * 16, [text("user", f"q{n}")], text("assistant", "a"), n),
                "trace_id": trace,
            },
        ]
    store.write(lake, "spans", spans_table(rows))
    done: list[int] = []
    result = rebuild(lake, chunk_rows=4, progress=done.append)
    assert (result.traces, result.trajectories) == (5, 5) and done[-1] == 5 and len(done) > 1
    names = store.connect(lake).sql("SELECT agent_name FROM trajectories ORDER BY 1").fetchall()
    assert [n for (n,) in names] == [f"bot{n}" for n in range(5)]
    only = CliRunner().invoke(
        cli_app, ["assemble", "--lake", lake.root, "--trace-id", f"{3:032x}", "--since", "2026-11-20"]
    )
    assert only.exit_code == 0 and "assembled 1 traces" in only.stdout


def test_rebuild_since_reads_whole_traces_that_cross_midnight(lake: store.Lake) -> None:
    from ingest.lakeio import rebuild

    # The agent span starts on 2026-11-19, its LLM call on 2026-11-20 (partition `dt` follows start_time).
    before_midnight, after_midnight = -12 * 3600 - 10, -12 * 3600 + 10
    rows = [
        agent("a" * 16, None, "bot", before_midnight),
        chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), after_midnight),
    ]
    store.write(lake, "spans", spans_table(rows))
    full = assemble(spans_table(rows)).trajectories.drop_columns(["_written_at"]).to_pylist()

    result = rebuild(lake, since=datetime(2026, 11, 20, tzinfo=UTC).date())
    assert (result.traces, result.trajectories) == (1, 1)
    stored = store.connect(lake).sql("SELECT * EXCLUDE (_written_at) FROM trajectories").to_arrow_table()
    assert stored.to_pylist() == full  # not a trajectory rebuilt from the later half alone
    assert full[0]["agent_name"] == "bot"


def test_a_trace_that_breaks_assembly_is_recorded_and_stops_no_other(
    lake: store.Lake, monkeypatch: Any
) -> None:
    import ingest.assembly.traces as traces

    bad = f"{99:032x}"
    real = traces.normalize_span

    def fragile(
        span: dict[str, Any], memo: Any = None
    ) -> Any:  # a shape no normaliser expected, in one trace only
        if span["trace_id"] == bad:
            raise ValueError("dictionary update sequence element #0 has length 1; 2 is required")
        return real(span, memo)

    monkeypatch.setattr(traces, "normalize_span", fragile)
    rows = []
    for n in (1, 99, 2):
        trace = f"{n:032x}"
        rows += [
            {**agent("a" * 16, None, f"bot{n}", n), "trace_id": trace},
            {
                **chat("b" * 16, "a" * 16, [text("user", f"q{n}")], text("assistant", "a"), n),
                "trace_id": trace,
            },
        ]
    store.write(lake, "spans", spans_table(rows))
    result = CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "3 traces -> 2 trajectories" in result.stdout and "1 traces failed to assemble" in result.stdout
    con = store.connect(lake)
    assert sorted(r[0] for r in con.execute("SELECT agent_name FROM trajectories").fetchall()) == [
        "bot1",
        "bot2",
    ]
    (failure,) = con.execute(
        "SELECT trace_id, stage, status, error_class, reason, detail, span_count FROM ingest_errors"
    ).fetchall()
    assert failure[:4] == (bad, "assemble", "failed", "ValueError")
    assert failure[4] == "value_error" and failure[6] == 2
    assert "dictionary update sequence" in failure[5] and "fragile" in failure[5]
    assert con.execute(f"SELECT count(*) FROM spans WHERE trace_id = '{bad}'").fetchall() == [(2,)]

    monkeypatch.setattr(traces, "normalize_span", real)  # the normaliser is fixed: the trace goes through
    CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root, "--trace-id", bad])
    con = store.connect(lake)
    assert con.execute("SELECT status FROM ingest_errors").fetchall() == [("resolved",)]
    assert con.execute(f"SELECT count(*) FROM trajectories WHERE trace_id = '{bad}'").fetchall() == [(1,)]


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
