"""The judge prompt: shared prefix once, labelled trajectories, seeded shuffle, truncation rule."""

from __future__ import annotations

import json
import re

import pytest

from judging.errors import JudgeCallError
from judging.ruler.prompt import build_prompt, common_prefix, cut_middle, shuffle_order
from tests.judging.helpers import make_group, make_traj, msg

BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.DOTALL)


def build(trajectories, seed=0, **kw):
    options = {"max_context_tokens": 100_000, "chars_per_token": 4.0, "max_message_chars": 8000}
    return build_prompt(trajectories, "RUBRIC-XYZ", seed, **{**options, **kw})


def test_shared_prefix_is_sent_once_and_each_trajectory_by_label():
    group = make_group("g", ["alpha", "beta", "gamma"], prompt="Book a flight to Oslo")
    prompt = build(group)
    system, user = prompt.messages[0]["content"], prompt.messages[1]["content"]
    assert "RUBRIC-XYZ" in system and '"scores"' in system
    assert user.count("Book a flight to Oslo") == 1  # the prompt prefix, once
    assert "<context>" in user
    blocks = dict(BLOCK.findall(user))
    assert sorted(blocks) == ["t1", "t2", "t3"]
    # each block holds only that trajectory's remainder, and the label maps back to it
    for label, body in blocks.items():
        answer = {"g-0": "alpha", "g-1": "beta", "g-2": "gamma"}[prompt.labels[label]]
        assert json.loads(body) == [{"role": "assistant", "content": answer}]


def test_shuffle_is_seeded_and_recorded():
    group = make_group("g", [f"answer {i}" for i in range(6)])
    orders = {tuple(build(group, seed=s).labels.values()) for s in range(8)}
    assert len(orders) > 1  # different seeds present different orders
    assert build(group, seed=3).labels == build(group, seed=3).labels  # same seed, same order
    assert shuffle_order(6, 3) == shuffle_order(6, 3)
    assert build(group, seed=3).seed == 3


def test_common_prefix_keeps_something_to_judge():
    same = [msg("user", "q"), msg("assistant", "a")]
    assert common_prefix([same, same]) == 1  # identical trajectories still each show their answer
    assert common_prefix([same, [msg("user", "q"), msg("assistant", "b")]]) == 1
    assert common_prefix([same, [msg("user", "other")]]) == 0


def test_long_messages_are_cut_in_the_middle():
    assert cut_middle("x" * 10, 20) == "x" * 10
    cut = cut_middle("a" * 500 + "b" * 500, 100)
    assert cut.startswith("a") and cut.endswith("b") and "chars truncated" in cut and len(cut) < 130
    group = make_group("g", ["A" * 5000 + "TAIL", "short"])
    prompt = build(group, max_message_chars=1000)
    assert prompt.truncated and "TAIL" in prompt.messages[1]["content"]  # the end of an answer survives


def test_inner_messages_are_dropped_when_caps_are_not_enough():
    middle = [msg("tool", "result " + "z" * 2000, name="search", tool_call_id=f"c{i}") for i in range(30)]
    group = [
        make_traj("a", "FINAL-A", group_id="g", middle=middle),
        make_traj("b", "FINAL-B", group_id="g", middle=middle[:3]),
    ]
    prompt = build(group, max_context_tokens=2000, max_message_chars=2000)
    user = prompt.messages[1]["content"]
    assert prompt.truncated and prompt.omitted_messages > 0
    assert "messages omitted]" in user
    assert "FINAL-A" in user and "FINAL-B" in user  # final answers are always kept
    assert prompt.estimated_tokens <= 2000


def test_a_group_that_cannot_fit_fails_with_context_overflow():
    group = make_group("g", ["x"] * 50)
    with pytest.raises(JudgeCallError) as info:
        build(group, max_context_tokens=500)
    assert info.value.reason == "context_overflow" and not info.value.retryable
