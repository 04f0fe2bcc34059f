"""Labels as data (issue 54): imported from a file, sent with feedback over OTLP, seen by SQL,
erased with their user's data, and used by scenarios as the right answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.demo.capture import capture_production_traces, corrects_answer
from flows.demo.task import make_questions
from store.catalog.connection import connect
from store.erasure.verify import files_holding
from store.lake import Lake
from store.writer import write
from tests.training.helpers import make_trajectory
from training.replay.scenario_io import create_scenarios, read_scenarios

runner = CliRunner()
TRACE = "ab" * 16


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _labels(lake: Lake) -> list[dict]:
    result = runner.invoke(
        app,
        [
            "sql",
            "SELECT * EXCLUDE (_written_at) FROM labels ORDER BY trajectory_id",
            "--lake",
            lake.root,
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_import_resolves_conversations_and_users_and_is_a_view(lake: Lake, tmp_path: Path) -> None:
    write(
        lake,
        "trajectories",
        [make_trajectory("t1", trace_id=TRACE, user_id="alice"), make_trajectory("t2", user_id="bob")],
    )
    path = _write(
        tmp_path / "labels.jsonl",
        {"trace_id": TRACE, "expected": "84", "verdict": 0, "comment": "it said 48"},
        {"trajectory_id": "t2", "verdict": True, "labeled_by": "reviewer@example", "source": "person"},
        "",
        {"trajectory_id": "elsewhere", "expected": {"answer": 3}, "user_id": "carol"},
    )
    result = runner.invoke(app, ["labels", "import", str(path), "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "imported 3 labels" in result.output and "2 of their conversations" in result.output
    rows = {r["trajectory_id"]: r for r in _labels(lake)}
    assert set(rows) == {"t1", "t2", "elsewhere"}
    # a trace id names its conversation in the lake, and the label takes the conversation's user
    assert (rows["t1"]["trace_id"], rows["t1"]["user_id"]) == (TRACE, "alice")
    assert (json.loads(rows["t1"]["expected"]), rows["t1"]["verdict"], rows["t1"]["source"]) == (
        "84",
        0.0,
        "file",
    )
    assert (rows["t2"]["expected"], rows["t2"]["verdict"], rows["t2"]["source"]) == (None, 1.0, "person")
    assert rows["elsewhere"]["user_id"] == "carol"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "labels.jsonl:2"),
        ({"expected": "3"}, "give `trajectory_id` or `trace_id`"),
        ({"trajectory_id": "t1"}, "give `expected`"),
        ({"trajectory_id": "t1", "verdict": 2}, "`verdict` must be a number in [0, 1]"),
        ({"trajectory_id": "t1", "expected": "3", "answer": "3"}, "unknown field `answer`"),
        ({"trajectory_id": "t1", "expected": "3", "source": "feedback"}, "`source` is `feedback`"),
        ({"trajectory_id": "ok", "expected": "4"}, "labelled `expected` again (first at"),
        ({"trajectory_id": "t1", "feedback": "good"}, "`feedback` must be a finite number or a boolean"),
        ({"trajectory_id": "t1", "feedback": float("nan")}, "labels.jsonl:2"),  # NaN: not JSON a reward takes
    ],
)
def test_a_bad_line_exits_2_naming_it_and_writes_nothing(
    lake: Lake, tmp_path: Path, line: object, says: str
) -> None:
    path = _write(tmp_path / "labels.jsonl", {"trajectory_id": "ok", "expected": "1"}, line)
    result = runner.invoke(app, ["labels", "import", str(path), "--lake", lake.root])
    assert result.exit_code == 2, result.output
    assert says in result.output and "labels.jsonl:2" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not lake.has_table("labels")  # nothing partial: the good first line was not written
    assert not lake.has_table("rewards")


def test_feedback_lines_are_the_user_feedback_of_traced_conversations(lake: Lake, tmp_path: Path) -> None:
    """Feedback kept outside the agent (a ratings export) joins the traces it rates, as
    `ingest.feedback` would have sent it: `user_feedback` rewards, what production is measured by."""
    write(
        lake,
        "trajectories",
        [make_trajectory("t1", trace_id=TRACE, user_id="alice"), make_trajectory("t2", user_id="bob")],
    )
    path = _write(
        tmp_path / "ratings.jsonl",
        {"trace_id": TRACE, "feedback": False, "comment": "wrong unit", "expected": "12 km"},
        {"trajectory_id": "t2", "feedback": 4.5},
    )
    result = runner.invoke(app, ["labels", "import", str(path), "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "imported 1 labels and 2 feedback" in result.output
    rewards = runner.invoke(
        app,
        [
            "sql",
            "SELECT trajectory_id, name, scorer, value, explanation FROM rewards ORDER BY trajectory_id",
            "--lake",
            lake.root,
            "--format",
            "json",
        ],
    )
    assert json.loads(rewards.stdout) == [
        {
            "trajectory_id": "t1",
            "name": "user_feedback",
            "scorer": "file",
            "value": 0.0,
            "explanation": "wrong unit",
        },
        {"trajectory_id": "t2", "name": "user_feedback", "scorer": "file", "value": 4.5, "explanation": None},
    ]
    ((label),) = _labels(lake)  # the right answer is a label; a score alone is not
    assert (label["trajectory_id"], json.loads(label["expected"])) == ("t1", "12 km")
    twice = _write(
        tmp_path / "twice.jsonl", {"trajectory_id": "t2", "feedback": 1}, {"trace_id": "t2", "feedback": 0}
    )
    result = runner.invoke(app, ["labels", "import", str(twice), "--lake", lake.root])
    assert result.exit_code == 2 and "has `feedback` again (first at" in result.output


def test_corrections_sent_with_feedback_over_otlp_become_labels_and_scenarios(lake: Lake) -> None:
    """The demo's users send the right answer with every thumbs-down (share 1): each wrong answer's
    conversation gets a `feedback` label holding it, and its scenario expects that, never the
    answer the user rejected."""
    questions = make_questions(16, seed=0)
    stats = capture_production_traces(lake, 16, seed=0, correction_share=1.0)
    wrong = 16 - stats["correct"]
    assert wrong >= 1 and stats["corrections"] == wrong  # the scripted production LLM errs on some
    # one trajectory per agent run, however often a trace was re-assembled as its feedback came in
    assert stats["trajectories"] == 16 <= stats["trajectory_writes"]
    labels = _labels(lake)
    assert len(labels) == wrong
    assert {r["source"] for r in labels} == {"feedback"} and {r["verdict"] for r in labels} == {0.0}
    answers = {q.answer for q in questions}
    assert all(json.loads(r["expected"])["final_output"] in answers for r in labels)

    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    scenarios = {s.source_trajectory_id: s for s in read_scenarios(lake)}
    finals = dict(connect(lake).sql("SELECT trajectory_id, final_output FROM trajectories").fetchall())
    for label in labels:
        scenario = scenarios[label["trajectory_id"]]
        assert scenario.rated == "wrong" and scenario.expected_source == "label"
        assert (
            scenario.expected
            == json.loads(label["expected"])
            != {"final_output": finals[label["trajectory_id"]]}
        )
    right = [s for s in scenarios.values() if s.rated == "right"]
    assert len(right) == stats["correct"] and {s.expected_source for s in right} == {"rated_right"}


def test_corrections_go_to_a_stable_share_of_questions() -> None:
    texts = [q.text for q in make_questions(200, seed=0)]
    share = sum(corrects_answer(t, 0, 0.5) for t in texts) / len(texts)
    assert 0.35 < share < 0.65
    assert [corrects_answer(t, 0, 0.5) for t in texts] == [corrects_answer(t, 0, 0.5) for t in texts]


def test_forget_erases_a_users_labels_and_keeps_everyone_elses(lake: Lake, tmp_path: Path) -> None:
    write(
        lake,
        "trajectories",
        [
            make_trajectory("t-alice", trace_id=TRACE, user_id="alice"),
            make_trajectory("t-bob", user_id="bob"),
        ],
    )
    path = _write(
        tmp_path / "labels.jsonl",
        {"trace_id": TRACE, "expected": "secret-answer-of-alice"},
        {"trajectory_id": "t-bob", "expected": "bob-answer"},
        # a label of alice's whose conversation never reached the lake: found by its user
        {"trajectory_id": "t-alice-later", "user_id": "alice", "expected": "another-of-alice"},
    )
    assert runner.invoke(app, ["labels", "import", str(path), "--lake", lake.root]).exit_code == 0
    assert files_holding(lake, ["secret-answer-of-alice", "another-of-alice"])
    done = runner.invoke(app, ["forget", "--user-id", "alice", "--yes", "--lake", lake.root])
    assert done.exit_code == 0, done.output
    assert [r["trajectory_id"] for r in _labels(lake)] == ["t-bob"]
    assert files_holding(lake, ["secret-answer-of-alice", "another-of-alice"]) == []
    audit = connect(lake).sql("SELECT rows FROM erasures").fetchall()
    assert json.loads(audit[0][0])["labels"] == 2
