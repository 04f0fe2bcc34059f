"""Selections from the lake: SFT conversations, GRPO groups with masks and advantages, lineage, errors."""

from __future__ import annotations

import json

import pytest

from store.errors import SelectionError
from store.lake import Lake
from store.writer import write
from tests.training.train_helpers import msg, reward, traj, turn
from training.datasets import flatten_turns, select_grpo, select_sft
from training.errors import MissingTokenData, TokenDataMismatch
from training.lineage import as_of_versions, digest_ids

ALL = "SELECT trajectory_id FROM trajectories"


def add_call(tid: str) -> dict:
    call = {"id": "c1", "name": "add", "arguments": json.dumps({"a": 2, "b": 3})}
    return traj(
        tid,
        messages=[
            msg("user", "What is 2 + 3?"),
            msg("assistant", None, tool_calls=[call]),
            msg("tool", "5", name="add", tool_call_id="c1"),
            msg("assistant", "It is 5."),
        ],
        tools=json.dumps(
            [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
        ),
        source="otel",
    )


# --- SFT -----------------------------------------------------------------------------------------


def test_sft_rows_keep_tools_and_tool_calls(lake: Lake) -> None:
    write(lake, "trajectories", [add_call("t1"), traj("t2", source="langfuse")])
    selection = select_sft(lake, ALL + " WHERE source = 'otel'")
    assert [r["trajectory_id"] for r in selection.rows] == ["t1"]
    row = selection.rows[0]
    assert row["tools"][0]["function"]["name"] == "add"
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}  # arguments as an object
    assert row["messages"][2] == {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"}


def test_sft_lineage_names_rows_and_the_table_versions_read(lake: Lake) -> None:
    write(lake, "trajectories", [traj("a"), traj("b")])
    write(lake, "trajectories", [traj("c")])  # version 0 created the table; this is version 2
    selection = select_sft(lake, ALL + " WHERE trajectory_id IN ('a', 'b')")
    lineage = selection.lineage
    assert lineage.trajectory_count == 2
    assert lineage.trajectory_ids_digest == digest_ids(["b", "a"])
    assert lineage.table_versions["trajectories"]["version"] == 2
    assert set(lineage.table_versions) == {"trajectories"}  # tables that do not exist yet are not named

    # As of version 1, `c` did not exist; as of version 2, `a` read as it was then.
    write(lake, "trajectories", [{**traj("a"), "messages": []}])  # `a` loses its messages later
    again = select_sft(lake, ALL, as_of=as_of_versions(lineage.to_dict()))
    assert {row["trajectory_id"] for row in again.rows} == {"a", "b", "c"}
    assert select_sft(lake, ALL, as_of={"trajectories": 1}).lineage.trajectory_ids_digest == digest_ids(
        ["a", "b"]
    )
    assert select_sft(lake, ALL).lineage.trajectory_count == 2  # now `a` has no assistant turn: skipped


def test_sft_skips_conversations_without_assistant(lake: Lake) -> None:
    write(lake, "trajectories", [traj("q", messages=[msg("user", "hi")]), traj("ok")])
    assert [r["trajectory_id"] for r in select_sft(lake, ALL).rows] == ["ok"]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (ALL + " WHERE false", "empty_selection"),
        ("SELECT source FROM trajectories", "missing_column"),
        ("SELECT nope FROM nowhere", "bad_sql"),
        ("   ", "empty_sql"),
        ("CREATE TABLE x AS SELECT 1 AS trajectory_id", "not_read_only"),
    ],
)
def test_sft_selection_errors(lake: Lake, sql: str, reason: str) -> None:
    write(lake, "trajectories", [traj("a")])
    with pytest.raises(SelectionError) as err:
        select_sft(lake, sql)
    assert err.value.reason == reason
    assert err.value.sql == sql


# --- turns -> one masked sequence ----------------------------------------------------------------


def test_flatten_multi_turn_masks_tool_tokens() -> None:
    turns = [
        turn([1, 2, 3], [10, 11], [-0.1, -0.2], "tool_calls"),
        turn([1, 2, 3, 10, 11, 50, 51, 52], [12, 2], [-0.3, -0.4]),
    ]
    prompt, completion, mask, logprobs, truncated = flatten_turns("t", turns)
    assert prompt == [1, 2, 3]
    assert completion == [
        10,
        11,
        50,
        51,
        52,
        12,
        2,
    ]  # last turn's prompt + completion, minus the first prompt
    assert mask == [1, 1, 0, 0, 0, 1, 1]  # the tool result (50-52) is not the model's
    assert logprobs == pytest.approx([-0.1, -0.2, 0.0, 0.0, 0.0, -0.3, -0.4])
    assert not truncated


def test_flatten_marks_truncated() -> None:
    assert flatten_turns("t", [turn([1], [5, 6], finish="length")])[4] is True


def test_flatten_rejects_non_prefix_turns() -> None:
    turns = [turn([1, 2], [3]), turn([1, 9, 3, 7], [4])]  # turn 1 re-tokenised the history differently
    with pytest.raises(TokenDataMismatch) as err:
        flatten_turns("tx", turns)
    assert (err.value.trajectory_id, err.value.turn, err.value.reason) == ("tx", 1, "prompt_not_prefix")
    assert "first difference at token 1" in str(err.value)


def test_flatten_rejects_logprob_length_mismatch() -> None:
    with pytest.raises(TokenDataMismatch) as err:
        flatten_turns("ty", [turn([1], [2, 3], [-1.0])])
    assert err.value.reason == "logprobs_length"


# --- GRPO groups --------------------------------------------------------------------------------


def scored_group(
    gid: str, values: list[float], *, finish: str = "stop", name: str = "correct"
) -> tuple[list, list]:
    rows, rewards = [], []
    for k, v in enumerate(values):
        tid = f"{gid}-{k}"
        rows.append(
            traj(tid, group_id=gid, scenario_id=gid, turns=[turn([1, 2, 3], [4 + k, 2], finish=finish)])
        )
        rewards.append(reward(tid, v, group_id=gid, name=name))
    return rows, rewards


def write_groups(lake: Lake, groups: dict[str, list[float]], **kw: object) -> None:
    rows, rewards = [], []
    for gid, values in groups.items():
        r, w = scored_group(gid, values, **kw)  # type: ignore[arg-type]
        rows += r
        rewards += w
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)


def test_grpo_groups_with_advantages_and_report(lake: Lake) -> None:
    write_groups(lake, {"g1": [1.0, 0.0], "g2": [0.5, 0.5], "solo": [1.0]})
    sel = select_grpo(lake, ALL)
    by_id = {e.trajectory_id: e for e in sel.examples}
    assert set(by_id) == {"g1-0", "g1-1", "g2-0", "g2-1"}
    assert by_id["g1-0"].advantage > 0 > by_id["g1-1"].advantage
    assert by_id["g2-0"].advantage == 0.0
    assert sel.report.equal_reward_groups == ["g2"]  # counted and reported, not dropped
    assert sel.dropped_small_groups == ["solo"]
    assert by_id["g1-0"].prompt_ids == [1, 2, 3] and by_id["g1-0"].completion_ids == [4, 2]
    lineage = sel.lineage
    assert lineage.reward_name == "correct" and lineage.reward_scorers == ["tests.reward@1"]
    assert lineage.trajectory_ids_digest == digest_ids(list(by_id))
    assert {"trajectories", "rewards"} <= set(lineage.table_versions)


def test_grpo_examples_come_in_scenario_order_not_group_id_order(lake: Lake) -> None:
    """Group ids hash the policy (the adapter's run id, random per run): the same replay by a rerun
    of the same training gets other ids, and the training order must not change with them."""
    rows, rewards = [], []
    for gid, scenario in (("g-b", "sc-1"), ("g-a", "sc-2")):
        r, w = scored_group(gid, [1.0, 0.0])
        for row in r:
            row["scenario_id"] = scenario
        rows += r
        rewards += w
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    assert [e.trajectory_id for e in select_grpo(lake, ALL).examples] == ["g-b-0", "g-b-1", "g-a-0", "g-a-1"]


def test_grpo_reward_column_overrides_stored_rewards(lake: Lake) -> None:
    write_groups(lake, {"g": [0.0, 0.0]})
    sel = select_grpo(
        lake,
        "SELECT trajectory_id, CASE WHEN trajectory_id = 'g-0' THEN 1 ELSE 0 END AS reward FROM trajectories",
    )
    assert [e.reward for e in sel.examples] == [1.0, 0.0]
    assert sel.report.equal_reward_groups == []


def test_grpo_failed_scores_are_not_zero(lake: Lake) -> None:
    rows, rewards = scored_group("g", [1.0, 0.0, 0.5])
    rewards[2] = reward("g-2", None, group_id="g", status="failed")  # a failed judge call
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    assert [e.trajectory_id for e in select_grpo(lake, ALL).examples] == ["g-0", "g-1"]


def test_grpo_text_only_is_a_clear_error(lake: Lake) -> None:
    write_groups(lake, {"g": [1.0, 0.0]})
    write(lake, "trajectories", [traj("prod-1", group_id="g", source="otel")])  # no turns
    write(lake, "rewards", [reward("prod-1", 1.0, group_id="g")])
    with pytest.raises(MissingTokenData) as err:
        select_grpo(lake, ALL)
    assert err.value.trajectory_ids == ["prod-1"]
    assert "`prod-1`" in str(err.value) and "trajlake train sft" in str(err.value)


def test_grpo_needs_groups_of_two(lake: Lake) -> None:
    write_groups(lake, {"a": [1.0], "b": [0.0]})
    with pytest.raises(SelectionError) as err:
        select_grpo(lake, ALL)
    assert err.value.reason == "no_groups"


def test_grpo_reward_name_resolution(lake: Lake) -> None:
    write_groups(lake, {"g": [1.0, 0.0]})
    _, rewards = scored_group("g", [0.2, 0.4], name="style")
    write(lake, "rewards", rewards)
    with pytest.raises(SelectionError) as err:
        select_grpo(lake, ALL)
    assert err.value.reason == "ambiguous_reward" and "`correct`, `style`" in str(err.value)
    assert [e.reward for e in select_grpo(lake, ALL, reward_name="style").examples] == [0.2, 0.4]
    with pytest.raises(SelectionError) as err:
        select_grpo(lake, ALL, reward_name="speed")
    assert err.value.reason == "missing_reward"


def test_grpo_unscored_selection(lake: Lake) -> None:
    write(lake, "trajectories", [traj("a", group_id="g", turns=[turn([1], [2])])])
    with pytest.raises(SelectionError) as err:
        select_grpo(lake, ALL)
    assert err.value.reason == "no_rewards"


def test_grpo_truncated_flag(lake: Lake) -> None:
    write_groups(lake, {"g": [1.0, 0.0]}, finish="length")
    assert all(e.truncated for e in select_grpo(lake, ALL).examples)
