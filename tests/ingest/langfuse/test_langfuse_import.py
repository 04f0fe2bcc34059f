"""`trajlake ingest langfuse --file`: exports of traces, v2 observations and scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.lakeio import assemble_traces
from ingest.langfuse.errors import ExportNotFound, MalformedExport
from ingest.langfuse.export.importer import import_langfuse_export
from ingest.langfuse.export.records import classify_record
from ingest.langfuse.pull import pull_langfuse
from store.lake import Lake
from tests.ingest.langfuse.agent_traces import seed_agent_trace
from tests.ingest.langfuse.conftest import T0, cli, make_config, seed_project, sql
from tests.ingest.langfuse.standin import StandinLangfuse

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

COMPARE = (
    "SELECT trajectory_id, source, trace_id, session_id, user_id, agent_name, model, started_at, ended_at, "
    "messages, tools, final_output, input_tokens, output_tokens, status, has_content, metadata "
    "FROM trajectories ORDER BY trajectory_id"
)
REWARDS = "SELECT trajectory_id, name, scorer, value, explanation, status, error, scored_at FROM rewards ORDER BY 1, 2, 3"


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def v2_observations(standin: StandinLangfuse) -> list[dict]:
    """The observations as the v2 API serves them (io as raw strings)."""
    groups = {
        "core",
        "basic",
        "time",
        "io",
        "metadata",
        "model",
        "usage",
        "prompt",
        "metrics",
        "trace_context",
    }
    return [standin._shape(o, groups, set()) for o in standin.observations]


def test_pull_and_file_import_give_the_same_trajectories(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str, tmp_path: Path
) -> None:
    pulled, imported = Lake(str(tmp_path / "pulled")), Lake(str(tmp_path / "imported"))
    pull_langfuse(pulled, make_config(langfuse_url, standin))
    export = write_jsonl(tmp_path / "export.jsonl", standin.export_traces())
    result = cli(
        "ingest", "langfuse", "--file", str(export), "--lake", imported.root, "--no-progress", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["records"], report["traces"], report["observations"]) == (6, 6, 24)
    assert len(sql(imported, COMPARE)) == 6
    assert sql(imported, COMPARE) == sql(pulled, COMPARE)
    assert sql(imported, REWARDS) == sql(pulled, REWARDS)  # v1 score shapes map like v3 ones


@pytest.mark.parametrize("layout", ["jsonl", "array", "api_response", "api_pages_jsonl"])
def test_v2_observation_files_in_every_layout(layout: str, tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    ids = seed_project(standin, n=3)
    items = v2_observations(standin)
    path = tmp_path / "obs.json"
    if layout == "jsonl":
        write_jsonl(path, items)
    elif layout == "array":
        path.write_text(json.dumps(items, indent=2))
    elif layout == "api_response":
        path.write_text(json.dumps({"data": items, "meta": {"cursor": None}}, indent=2))
    else:  # one saved page per line, as a paging script would dump them
        write_jsonl(path, [{"data": items[:5], "meta": {"cursor": "c1"}}, {"data": items[5:], "meta": {}}])
    report = import_langfuse_export(lake, path)
    assert report.observations == 12 and report.trajectories == 3
    rows = sql(lake, "SELECT trace_id, source, final_output FROM trajectories ORDER BY trace_id")
    assert [r["trace_id"] for r in rows] == ids and {r["source"] for r in rows} == {"langfuse"}
    assert rows[1]["final_output"] == "It is rainy, 14C in Oslo."


def test_parallel_assembly_gives_the_same_rows(tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    ids = seed_project(standin, n=6)
    import_langfuse_export(lake, write_jsonl(tmp_path / "export.jsonl", standin.export_traces()))
    serial = sql(lake, COMPARE)
    # Chunks of ~one trace, two worker processes: rows must come back complete and in order.
    counts = assemble_traces(lake, ids, workers=2, chunk_rows=4)
    assert (counts.traces, counts.trajectories) == (6, 6)
    assert sql(lake, COMPARE) == serial


def test_reimport_is_idempotent(tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    seed_project(standin, n=3)
    export = write_jsonl(tmp_path / "export.jsonl", standin.export_traces())
    import_langfuse_export(lake, export)
    first = sql(lake, COMPARE), sql(lake, REWARDS)
    import_langfuse_export(lake, export)
    assert (sql(lake, COMPARE), sql(lake, REWARDS)) == first
    assert sql(lake, "SELECT count(*) AS n FROM spans")[0]["n"] == 12


def test_observations_split_across_files_assemble_into_one_trajectory(tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    seed_agent_trace(standin, "ab" * 16, _t0(), include=("root", "gen1", "tool"))
    import_langfuse_export(lake, write_jsonl(tmp_path / "a.jsonl", v2_observations(standin)))
    standin.observations.clear()
    seed_agent_trace(standin, "ab" * 16, _t0(), include=("gen2",))
    import_langfuse_export(lake, write_jsonl(tmp_path / "b.jsonl", v2_observations(standin)))
    [row] = sql(lake, "SELECT messages, final_output FROM trajectories")
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert row["final_output"] == "It is rainy, 14C in Paris."


def test_malformed_records_reject_the_file_with_line_numbers(tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    seed_project(standin, n=3)
    lines = [json.dumps(t) for t in standin.export_traces()]
    lines.insert(1, '{"id": "broken", "observations": [')  # line 2: truncated JSON
    lines.append(json.dumps({"hello": "world"}))  # line 5: not a Langfuse record
    lines.append(
        json.dumps({"id": "o", "traceId": "t", "type": "SPAN", "startTime": "last tuesday"})
    )  # line 6
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedExport) as info:
        import_langfuse_export(lake, path)
    problems = [(p.line, p.reason) for p in info.value.problems]
    assert problems == [(2, "invalid_json"), (5, "unknown_record"), (6, "bad_timestamp")]
    assert "line 2: invalid_json" in str(info.value) and "nothing written" in str(info.value)
    assert not any(lake.has_table(t) for t in ("spans", "trajectories", "rewards"))
    assert not list(Path(lake.root).rglob("*.tmp"))  # no temporaries left behind


def test_malformed_json_array_reports_the_line(tmp_path: Path, lake: Lake) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        '[\n  {"id": "o1", "traceId": "t", "type": "SPAN", "startTime": "2026-08-01T10:00:00Z"},\n  {"id": oops}\n]'
    )
    with pytest.raises(MalformedExport) as info:
        import_langfuse_export(lake, path)
    assert [(p.line, p.reason) for p in info.value.problems] == [(3, "invalid_json")]


def test_bad_file_through_the_cli(tmp_path: Path, lake: Lake) -> None:
    missing = cli("ingest", "langfuse", "--file", str(tmp_path / "nope.jsonl"), "--lake", lake.root)
    assert missing.exit_code == 2 and "does not exist" in missing.output  # bad input: 2
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "x", "traceId": "t", "type": "SPAN", "startTime": "2026-08-01T10:00:00Z"}\nnot json\n'
    )
    result = cli("ingest", "langfuse", "--file", str(path), "--lake", lake.root, "--no-progress")
    assert result.exit_code == 2 and "line 2: invalid_json" in result.output
    with pytest.raises(ExportNotFound):
        import_langfuse_export(lake, tmp_path)


def test_record_classification() -> None:
    assert classify_record({"id": "t", "timestamp": "x", "observations": []}) == "trace"
    assert classify_record({"id": "t", "timestamp": "x", "name": "n"}) == "trace"
    assert classify_record({"id": "o", "traceId": "t", "startTime": "x", "type": "SPAN"}) == "observation"
    assert (
        classify_record({"id": "s", "name": "n", "value": 1, "dataType": "NUMERIC", "timestamp": "x"})
        == "score"
    )
    assert classify_record({"id": "s", "name": "n", "value": 1, "traceId": "t", "timestamp": "x"}) == "score"
    assert classify_record([1, 2]) == "unknown"


def test_standalone_score_records_become_rewards(tmp_path: Path, lake: Lake) -> None:
    standin = StandinLangfuse()
    tid = "cd" * 16
    seed_agent_trace(standin, tid, _t0())
    records = [*v2_observations(standin)]
    records.append(
        {
            "id": "x1",
            "name": "thumbs",
            "dataType": "CATEGORICAL",
            "value": "thumbs_up",
            "source": "ANNOTATION",
            "timestamp": "2026-08-01T10:00:00Z",
            "subject": {"kind": "trace", "id": tid},
        }
    )
    report = import_langfuse_export(lake, write_jsonl(tmp_path / "mixed.jsonl", records))
    assert report.rewards == 1
    [reward] = sql(lake, "SELECT * FROM rewards")
    assert (reward["trajectory_id"], reward["value"], reward["scorer"]) == (
        tid,
        1.0,
        "langfuse:annotation",
    )


def test_a_correction_in_an_export_is_the_conversations_label(tmp_path: Path, lake: Lake) -> None:
    """A `CORRECTION` score in an export file gives its conversation's right answer, as a pulled or
    pushed one does: a label the scenario takes as `expected`, with the conversation's user."""
    standin = StandinLangfuse()
    tid = "cd" * 16
    seed_agent_trace(standin, tid, _t0())
    correction = {
        "id": "fix-1",
        "name": "correction",
        "dataType": "CORRECTION",
        "value": "It is 14C in Paris.",
        "source": "ANNOTATION",
        "timestamp": "2026-08-01T10:00:00Z",
        "subject": {"kind": "trace", "id": tid},
    }
    report = import_langfuse_export(
        lake, write_jsonl(tmp_path / "export.jsonl", [*v2_observations(standin), correction])
    )
    assert (report.rewards, report.labels) == (1, 1)
    [label] = sql(lake, "SELECT trajectory_id, trace_id, expected, source, labeled_by, user_id FROM labels")
    [user] = sql(lake, "SELECT user_id FROM trajectories")
    assert label == {
        "trajectory_id": tid,
        "trace_id": tid,
        "expected": json.dumps({"final_output": "It is 14C in Paris."}),
        "source": "feedback",
        "labeled_by": "langfuse:annotation",
        "user_id": user["user_id"],
    }
    # importing the file again changes nothing: the label's key is the conversation's
    assert import_langfuse_export(lake, tmp_path / "export.jsonl").labels == 1
    assert sql(lake, "SELECT count(*) AS n FROM labels") == [{"n": 1}]


def _t0():  # type: ignore[no-untyped-def]

    return T0
