"""Built-in rewards, the registry, and how reward failures become outcomes."""

from __future__ import annotations

import pytest

from judging.errors import RewardSpecError
from judging.registry import BUILTIN_REWARDS, builtin_names, evaluate_reward, from_function, get_reward
from judging.rewards import (
    exact_match_reward,
    get_length_penalty_reward,
    get_turn_penalty_reward,
    normalized_match_reward,
    tool_success_reward,
    valid_json_reward,
)
from judging.rewards.base import version_of
from tests.judging.helpers import msg


def traj(answer: str | None = None, messages: list | None = None, **extra) -> dict:
    return {"trajectory_id": "t", "final_output": answer, "messages": messages or [], **extra}


def scen(expected: str | None) -> dict:
    return {"scenario_id": "s1", "expected": expected}


@pytest.mark.parametrize(
    ("answer", "expected", "value"),
    [
        ("Paris", '{"answer": "Paris"}', 1.0),  # the answer key of an expected object
        (" Paris\n", '"Paris"', 1.0),  # surrounding whitespace is not part of the answer
        ("paris", '"Paris"', 0.0),  # exact means case too
        ("Lyon", '{"answer": ["Paris", "Lyon"]}', 1.0),  # a list means any of them
        ("Paris", "Paris", 1.0),  # plain text `expected` (not JSON) is the answer itself
        ("42", '{"output": 42}', 1.0),  # numbers compare as text
        (None, '"Paris"', 0.0),  # no final answer at all
    ],
)
def test_exact_match(answer, expected, value):
    assert exact_match_reward(traj(answer), scen(expected)) == value


@pytest.mark.parametrize(
    ("answer", "expected", "value"),
    [
        ("The Eiffel Tower.", '"eiffel tower"', 1.0),  # articles, case, punctuation ignored
        ("  PARIS  ", '"paris"', 1.0),
        ("Paris, France", '"paris"', 0.0),  # extra words are a different answer
    ],
)
def test_normalized_match(answer, expected, value):
    assert normalized_match_reward(traj(answer), scen(expected)) == value


def test_final_answer_falls_back_to_last_assistant_message():
    t = traj(None, [msg("user", "q"), msg("assistant", "Paris"), msg("assistant", None)])
    assert exact_match_reward(t, scen('"Paris"')) == 1.0


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ('{"refund": true}', 1.0),
        ("[1, 2, 3]", 1.0),
        ('```json\n{"a": 1}\n```', 1.0),  # one fenced block is still JSON output
        ("{'a': 1}", 0.0),  # Python repr is not JSON
        ("3", 0.0),  # a bare scalar is not structured output
        ('{"a": 1', 0.0),  # truncated
        (None, 0.0),
    ],
)
def test_valid_json(answer, value):
    assert valid_json_reward(traj(answer), None) == value


def test_tool_success_counts_failed_and_unanswered_calls():
    call = lambda i: {"id": f"c{i}", "name": "lookup", "arguments": "{}"}  # noqa: E731
    messages = [
        msg("assistant", None, tool_calls=[call(1), call(2)]),
        msg("tool", "ok", tool_call_id="c1", name="lookup", is_error=False),
        msg("tool", "Error: boom", tool_call_id="c2", name="lookup", is_error=True),
        msg("assistant", None, tool_calls=[call(3)]),  # never answered: counts as failed
        msg("assistant", "done"),
    ]
    assert tool_success_reward(traj("done", messages), None) == pytest.approx(1 / 3)
    assert tool_success_reward(traj("no tools", [msg("assistant", "hi")]), None) == 1.0


def test_penalties_are_linear_between_free_and_limit():
    turns = get_turn_penalty_reward(free_turns=2, max_turns=6)
    assistant = msg("assistant", "x")
    assert [turns(traj(messages=[assistant] * n), None) for n in (1, 2, 4, 6, 9)] == [
        0.0,
        0.0,
        -0.5,
        -1.0,
        -1.0,
    ]
    length = get_length_penalty_reward(free_tokens=10, max_tokens=20)
    assert length(traj(output_tokens=15), None) == -0.5
    # token data wins over the `output_tokens` column
    turns_data = [{"completion_token_ids": list(range(20))}]
    assert length(traj(output_tokens=0, turns=turns_data), None) == -1.0


def test_penalty_factories_reject_impossible_limits():
    with pytest.raises(ValueError, match="free_turns < max_turns"):
        get_turn_penalty_reward(free_turns=5, max_turns=5)


def test_missing_expected_is_a_failed_outcome_not_a_zero():
    [outcome] = evaluate_reward(get_reward("exact_match"), traj("Paris"), scen(None))
    assert (outcome.status, outcome.error, outcome.value) == ("failed", "no_expected", None)
    assert "`s1`" in outcome.explanation
    [outcome] = evaluate_reward(get_reward("exact_match"), traj("Paris"), scen('{"foo": 1}'))
    assert outcome.error == "no_expected_answer" and "foo" in outcome.explanation


def test_registry_resolves_builtins_with_versioned_scorers():
    assert builtin_names() == sorted(BUILTIN_REWARDS)
    reward = get_reward("exact_match")
    assert (reward.name, reward.scorer) == ("exact_match", "judging.rewards.match:exact_match_reward@1")
    penalty = get_reward("turn_penalty")
    assert penalty.scorer == "judging.rewards.penalties:get_turn_penalty_reward@1-free4-max16"


def test_registry_resolves_import_paths():
    reward = get_reward("tests.judging.custom_rewards:answer_length_reward")
    assert reward.name == "answer_length"  # `_reward` suffix dropped
    assert reward.scorer == "tests.judging.custom_rewards:answer_length_reward@7"
    undeclared = get_reward("tests.judging.custom_rewards:quality_parts_reward", name="quality")
    assert undeclared.name == "quality" and undeclared.version.startswith("src-")
    outcomes = evaluate_reward(undeclared, traj("good good"), None)
    assert [(o.name, o.value) for o in outcomes] == [("quality.good", 2.0), ("quality.short", 1.0)]


def test_unversioned_reward_version_follows_its_source():
    def a_reward(t, s):
        return 1.0

    def b_reward(t, s):
        return 0.0

    assert version_of(a_reward) != version_of(b_reward)
    assert from_function(a_reward).name == "a"


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("exact", "neither a built-in reward nor an import path"),
        ("no_such_module_xyz:fn", "cannot import module `no_such_module_xyz`"),
        ("tests.judging.custom_rewards:missing_reward", "has no `missing_reward`"),
        ("tests.judging.custom_rewards:NOT_A_FUNCTION", "not a function"),
    ],
)
def test_bad_reward_specs_name_the_spec(spec, match):
    with pytest.raises(RewardSpecError, match=match) as info:
        get_reward(spec)
    assert info.value.spec == spec
    assert f"`{spec}`" in str(info.value)


def test_raising_and_nan_rewards_become_failed_outcomes():
    boom = get_reward("tests.judging.custom_rewards:exploding_reward")
    [outcome] = evaluate_reward(boom, {"trajectory_id": "g-1"}, None)
    assert (outcome.status, outcome.error) == ("failed", "reward_raised")
    assert "tool database offline" in outcome.explanation
    [outcome] = evaluate_reward(get_reward("tests.judging.custom_rewards:nan_reward"), traj("x"), None)
    assert (outcome.status, outcome.error) == ("failed", "invalid_value")
