"""Scenarios from trajectories (prefix, turn, tools, expected, recorded results), JSONL loading, stable splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.catalog.connection import connect
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from tests.training.helpers import TOOLS, make_trajectory
from training.replay.errors import ScenarioError
from training.replay.scenario_io import create_scenarios, load_scenarios, read_scenarios, slice_selection
from training.replay.scenarios import ScenarioConfig, assign_split, prompt_prefix


def _scenario_rows(lake: Lake) -> list[dict]:
    con = connect(lake)
    return con.sql("SELECT * FROM scenarios ORDER BY scenario_id").to_arrow_table().to_pylist()


def _feedback(trajectory_id: str, value: float) -> dict:
    return {
        "trajectory_id": trajectory_id,
        "name": "user_feedback",
        "scorer": "otel:gen_ai.evaluation.result",
        "value": value,
        "scored_at": utc_now(),
        "status": "ok",
    }


def test_create_cuts_prefix_and_keeps_tools_expected_and_recordings(lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory("t1"), make_trajectory("t2", source="langfuse")])
    write(lake, "rewards", [_feedback("t1", 1.0)])  # rated right: its answer is the expected one
    result = create_scenarios(lake, "SELECT trajectory_id FROM trajectories WHERE source = 'otel'")
    assert len(result.scenario_ids) == 1 and result.skipped == []
    (row,) = _scenario_rows(lake)
    assert row["source_trajectory_id"] == "t1"
    assert [m["role"] for m in row["messages"]] == ["system", "user"]
    assert row["messages"][1]["content"] == "What is 12 * 7?"
    assert json.loads(row["tools"]) == TOOLS
    assert json.loads(row["expected"]) == {"final_output": "The answer is 84."}
    assert (row["expected_source"], row["rated"]) == ("rated_right", "right")
    assert row["split"] in ("train", "val")
    metadata = json.loads(row["metadata"])
    assert metadata["recorded_tools"] == [
        {
            "name": "calculator",
            "arguments": '{"expression": "12 * 7"}',
            "content": '{"result": 84}',
            "is_error": False,
        }
    ]
    assert metadata["agent_name"] == "calc-agent"


def test_chosen_turn_and_metadata_expected(lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory("t1", metadata=json.dumps({"expected": {"answer": 84}}))])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories", ScenarioConfig(turn=1))
    (scenario,) = read_scenarios(lake)
    # Cut before the second assistant turn: the tool call and its result are part of the prompt.
    assert [m["role"] for m in scenario.messages] == ["system", "user", "assistant", "tool"]
    assert scenario.expected == {"answer": 84}
    assert scenario.metadata["turn"] == 1


def test_create_is_idempotent_and_ids_are_deterministic(lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(5)])
    first = create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    second = create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    assert first.scenario_ids == second.scenario_ids
    assert connect(lake).execute("SELECT count(*) FROM scenarios").fetchone()[0] == 5


def test_unusable_trajectories_are_skipped_with_reasons_and_all_bad_writes_nothing(lake: Lake) -> None:
    no_user = make_trajectory("t-bad", messages=[{"role": "assistant", "content": "hi"}])
    write(lake, "trajectories", [make_trajectory("t-ok"), no_user])
    result = create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    assert result.skipped == [("t-bad", "no_prompt")]
    with pytest.raises(ScenarioError, match="nothing was written") as err:
        create_scenarios(lake, "SELECT trajectory_id FROM trajectories WHERE trajectory_id = 't-bad'")
    assert err.value.reason == "no_scenarios"
    with pytest.raises(ScenarioError, match="there is no turn 5 to cut at"):
        create_scenarios(
            lake,
            "SELECT trajectory_id FROM trajectories WHERE trajectory_id = 't-ok'",
            ScenarioConfig(turn=5),
        )
    assert len(_scenario_rows(lake)) == 1


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT trajectory_id FROM trajectories WHERE false", "empty_selection"),
        ("SELECT source FROM trajectories", "missing_column"),
        ("SELECT trajectory_id FROM nowhere", "bad_sql"),
    ],
)
def test_bad_selections_name_the_problem(lake: Lake, sql: str, reason: str) -> None:
    write(lake, "trajectories", [make_trajectory("t1")])
    with pytest.raises(ScenarioError) as err:
        create_scenarios(lake, sql)
    assert err.value.reason == reason
    assert _scenario_rows(lake) == []


def test_split_is_stable_and_roughly_the_fraction() -> None:
    keys = [f"trajectory-{i}" for i in range(2000)]
    splits = [assign_split(k, 0.2) for k in keys]
    assert splits == [assign_split(k, 0.2) for k in keys]  # same answer every time
    assert 0.16 < splits.count("val") / len(keys) < 0.24
    # Growing the val fraction only moves scenarios from train to val, never back.
    assert all(assign_split(k, 0.3) == "val" for k, s in zip(keys, splits, strict=True) if s == "val")
    # Pinned values: a change of hashing would silently reshuffle every lake's split.
    assert [assign_split(f"t{i}", 0.5) for i in range(6)] == [assign_split(f"t{i}", 0.5) for i in range(6)]
    assert assign_split("t-fixed", 0.0) == "train" and assign_split("t-fixed", 1.0) == "val"


def test_split_follows_the_source_trajectory_across_turns(lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(20)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories", ScenarioConfig(turn=0, val_fraction=0.5))
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories", ScenarioConfig(turn=1, val_fraction=0.5))
    by_source: dict[str, set[str]] = {}
    for s in read_scenarios(lake):
        by_source.setdefault(s.source_trajectory_id, set()).add(s.split)
    assert all(len(splits) == 1 for splits in by_source.values())
    assert {next(iter(s)) for s in by_source.values()} == {"train", "val"}


def test_load_jsonl(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "scenarios.jsonl"
    lines = [
        {
            "messages": [{"role": "user", "content": "What is 1 + 1?"}],
            "tools": TOOLS,
            "expected": {"answer": 2},
        },
        {
            "scenario_id": "custom-1",
            "split": "val",
            "messages": [
                {"role": "user", "content": "What is 2 * 3?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": {"expression": "2 * 3"}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "name": "calculator", "content": "6"},
            ],
            "recorded_tools": [{"name": "calculator", "arguments": {"expression": "2 * 3"}, "content": "6"}],
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    result = load_scenarios(lake, path)
    assert len(result.scenario_ids) == 2 and "custom-1" in result.scenario_ids
    custom = read_scenarios(
        lake, "SELECT scenario_id FROM scenarios WHERE split = 'val' AND scenario_id = 'custom-1'"
    )[0]
    assert custom.messages[1]["tool_calls"] == [
        {"id": "a", "name": "calculator", "arguments": '{"expression":"2 * 3"}'}  # the lake's JSON text
    ]
    assert custom.recorded_tools[0]["content"] == "6"
    assert custom.openai_messages()[1]["tool_calls"][0]["function"]["arguments"] == '{"expression":"2 * 3"}'
    # Loading the same file again changes nothing (content-addressed ids).
    assert load_scenarios(lake, path).scenario_ids == result.scenario_ids
    assert len(_scenario_rows(lake)) == 2


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "bad_json"),
        ('{"tools": []}', "missing_messages"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "bad_role"),
        ('{"messages": [{"role": "user", "content": "x"}], "split": "test"}', "bad_split"),
        ("[1, 2]", "not_an_object"),
    ],
)
def test_bad_jsonl_line_is_named_and_nothing_is_written(
    lake: Lake, tmp_path: Path, line: str, reason: str
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "fine"}]}) + "\n" + line + "\n")
    with pytest.raises(ScenarioError) as err:
        load_scenarios(lake, path)
    assert err.value.reason == reason and err.value.item == f"{path}:2"
    assert f"{path}:2" in str(err.value)
    assert _scenario_rows(lake) == []


def test_prompt_prefix_without_assistant_turn_is_the_whole_conversation() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert prompt_prefix(messages) == messages
    assert prompt_prefix(messages, turn=1) is None


def test_round_slices_cover_the_selection_before_repeating(lake: Lake) -> None:
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(10)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    everything = "SELECT scenario_id FROM scenarios"
    con = connect(lake)

    def ids(sql: str) -> list[str]:
        return sorted(r[0] for r in con.execute(sql).fetchall())

    slices = [ids(slice_selection(lake, everything, 4, i)) for i in range(3)]
    assert [len(s) for s in slices] == [4, 4, 4]
    assert set(slices[0]).isdisjoint(slices[1])  # a new slice each round
    assert set(slices[0]) | set(slices[1]) | set(slices[2]) == set(ids(everything))  # all seen, then wrap
    assert len(set(slices[2]) & set(slices[0])) == 2  # the third slice wraps around to the start
    assert slices[0] == ids(slice_selection(lake, everything, 4, 0))  # the same slice for the same round
    assert slice_selection(lake, everything, 10, 3) == everything  # nothing to slice
    assert slice_selection(lake, everything, 0, 3) == everything
    with pytest.raises(ScenarioError) as err:
        slice_selection(lake, "SELECT 1 AS x", 4, 0)
    assert err.value.reason == "missing_column"


def test_round_slices_replay_what_users_rated_wrong_first(lake: Lake) -> None:
    """What production got wrong is the first slice: the groups a policy has most to learn from."""
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(10)])
    wrong = {"t3", "t7", "t8"}
    write(lake, "rewards", [_feedback(f"t{i}", 0.0 if f"t{i}" in wrong else 1.0) for i in range(10)])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    con = connect(lake)
    everything = "SELECT scenario_id FROM scenarios"

    def sources(sql: str) -> set[str]:
        return {
            r[0]
            for r in con.execute(
                f"SELECT source_trajectory_id FROM scenarios WHERE scenario_id IN ({sql})"
            ).fetchall()
        }

    first = sources(slice_selection(lake, everything, 4, 0))
    assert wrong < first and len(first) == 4  # every failure, then one more
    assert wrong.isdisjoint(sources(slice_selection(lake, everything, 4, 1)))
    # a slice of a narrower selection keeps the order within it
    assert sources(slice_selection(lake, f"{everything} WHERE rated = 'right'", 4, 0)).isdisjoint(wrong)


def test_expected_never_comes_from_an_answer_rated_wrong(lake: Lake) -> None:
    """Rated right: its answer; rated wrong: its label's answer, or none; unrated: none (issue 54)."""
    write(lake, "trajectories", [make_trajectory(t) for t in ("right", "wrong", "labelled", "unrated")])
    write(lake, "rewards", [_feedback("right", 1.0), _feedback("wrong", 0.0), _feedback("labelled", 0.0)])
    write(
        lake,
        "labels",
        [
            {
                "trajectory_id": "labelled",
                "name": "expected",
                "expected": json.dumps({"final_output": "84"}),
                "source": "feedback",
                "labeled_at": utc_now(),
            }
        ],
    )
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    by_source = {s.source_trajectory_id: s for s in read_scenarios(lake)}
    assert len(by_source) == 4  # a failure without a label is still a scenario
    got = {t: (s.expected, s.expected_source, s.rated) for t, s in by_source.items()}
    assert got == {
        "right": ({"final_output": "The answer is 84."}, "rated_right", "right"),
        "wrong": (None, None, "wrong"),
        "labelled": ({"final_output": "84"}, "label", "wrong"),
        "unrated": (None, None, None),
    }
    rows = (
        connect(lake)
        .sql("SELECT expected_source, count(*) AS n FROM scenarios GROUP BY ALL ORDER BY ALL")
        .fetchall()
    )
    assert rows == [("label", 1), ("rated_right", 1), (None, 2)]
