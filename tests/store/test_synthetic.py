"""The synthetic generator: deterministic, batch-independent, realistic and schema-valid."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest

from bench.synthetic import (
    SyntheticConfigError,
    synthetic_rewards,
    synthetic_scenarios,
    synthetic_trajectories,
    trajectory_ids,
)
from store.lake import Lake
from store.schema import table_spec
from store.writer import write


def _all(n: int, seed: int = 0, batch_size: int = 1000, **options: object) -> pa.Table:
    return pa.concat_tables(synthetic_trajectories(n, seed, batch_size=batch_size, **options))


def test_same_seed_same_data_whatever_the_batch_size() -> None:
    a = _all(300, seed=4, batch_size=7)
    b = _all(300, seed=4, batch_size=300)
    assert a.equals(b)
    assert _all(50, seed=4).equals(a.slice(0, 50))  # prefixes agree
    assert not _all(50, seed=5)["trajectory_id"].equals(a.slice(0, 50)["trajectory_id"])
    assert trajectory_ids(3, seed=4).to_pylist() == a["trajectory_id"].to_pylist()[:3]


def test_batches_have_the_table_schema_and_write_cleanly(lake: Lake) -> None:
    batches = list(synthetic_trajectories(250, seed=1, batch_size=100))
    assert [b.num_rows for b in batches] == [100, 100, 50]
    assert all(b.schema.equals(table_spec("trajectories").schema) for b in batches)
    assert write(lake, "trajectories", batches).rows == 250
    assert write(lake, "rewards", synthetic_rewards(250, seed=1)).rows > 500
    assert write(lake, "scenarios", synthetic_scenarios(250, seed=1)).rows > 0


def test_conversations_are_well_formed() -> None:
    table = _all(400, seed=3)
    for row in table.to_pylist():
        messages = row["messages"]
        rounds = (len(messages) - 3) // 2
        assert len(messages) == 3 + 2 * rounds
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assert messages[-1]["role"] == "assistant" and messages[-1]["tool_calls"] is None
        assert row["final_output"] == messages[-1]["content"]
        tools = {t["function"]["name"] for t in json.loads(row["tools"])}
        for call, result in zip(messages[2:-1:2], messages[3:-1:2], strict=True):
            (tool_call,) = call["tool_calls"]
            assert tool_call["name"] in tools
            json.loads(tool_call["arguments"])
            assert result["role"] == "tool"
            assert (result["tool_call_id"], result["name"]) == (tool_call["id"], tool_call["name"])
            assert result["is_error"] == result["content"].startswith("Error:")
    errors = sum(m["is_error"] is True for r in table["messages"].to_pylist() for m in r)
    tool_results = sum(m["role"] == "tool" for r in table["messages"].to_pylist() for m in r)
    assert 0.05 < errors / tool_results < 0.15  # tool_error_rate = 0.1
    assert 7 < sum(len(m) for m in table["messages"].to_pylist()) / table.num_rows < 9


def test_replayed_groups_share_a_prompt_and_carry_token_exact_turns() -> None:
    table = _all(64, seed=9, replayed_fraction=1.0, group_size=4)
    rows = table.to_pylist()
    assert {r["source"] for r in rows} == {"replay"}
    for start in range(0, 64, 4):
        group = rows[start : start + 4]
        assert len({(r["group_id"], r["scenario_id"], r["policy"]) for r in group}) == 1
        assert len({r["messages"][1]["content"] for r in group}) == 1
        assert len({tuple(r["turns"][0]["prompt_token_ids"]) for r in group}) == 1
    for row in rows:
        turns = row["turns"]
        assert len(turns) == sum(m["role"] == "assistant" for m in row["messages"])
        for before, after in itertools.pairwise(turns):
            grown = before["prompt_token_ids"] + before["completion_token_ids"]
            assert after["prompt_token_ids"][: len(grown)] == grown  # + the tool result's ids
            assert len(after["prompt_token_ids"]) > len(grown)
        for turn in turns:
            assert len(turn["logprobs"]) == len(turn["completion_token_ids"])
            assert all(lp <= 0 for lp in turn["logprobs"])
        assert [t["finish_reason"] for t in turns[:-1]] == ["tool_calls"] * (len(turns) - 1)
        assert row["input_tokens"] == sum(len(t["prompt_token_ids"]) for t in turns)


def test_production_traces_have_no_turns_or_group() -> None:
    rows = _all(40, seed=2, replayed_fraction=0.0).to_pylist()
    assert {r["source"] for r in rows} <= {"otel", "langfuse"}
    assert all(r["turns"] == [] and r["group_id"] is None and r["policy"] is None for r in rows)


def test_rewards_agree_with_the_trajectories() -> None:
    trajectories = {r["trajectory_id"]: r for r in _all(200, seed=6, replayed_fraction=0.5).to_pylist()}
    rewards = pa.concat_tables(synthetic_rewards(200, seed=6, replayed_fraction=0.5)).to_pylist()
    assert {r["trajectory_id"] for r in rewards} == set(trajectories)
    for reward in rewards:
        trajectory = trajectories[reward["trajectory_id"]]
        assert reward["group_id"] == trajectory["group_id"]
        if reward["name"] == "tool_success":
            results = [m for m in trajectory["messages"] if m["role"] == "tool"]
            expected = 1 - sum(m["is_error"] for m in results) / len(results) if results else 1.0
            assert reward["value"] == pytest.approx(expected)
        if reward["name"] == "ruler":
            assert trajectory["source"] == "replay"
            assert (reward["status"] == "failed") == (reward["value"] is None)


def test_bad_options_are_named() -> None:
    with pytest.raises(SyntheticConfigError) as info:
        next(synthetic_trajectories(10, replayed_fraction=1.5))
    assert info.value.option == "replayed_fraction"
    with pytest.raises(SyntheticConfigError, match="`groupsize`"):
        next(synthetic_trajectories(10, groupsize=4))
