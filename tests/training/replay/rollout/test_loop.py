"""The token-level agent loop on the real tiny tokenizer with a scripted sampler."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from store.messages import from_openai
from tests.training.helpers import TOOLS, ScriptedSampler, calculator_script
from training.replay.rollout.loop import AgentLoop, RolloutLimits, turn_seed
from training.replay.rollout.tools import CallableTools, ChainTools, RecordedTools, make_tools
from training.replay.samplers.base import SamplingParams
from training.replay.scenarios import Scenario


def _scenario(recorded: list[dict] | None = None) -> Scenario:
    return Scenario(
        scenario_id="sc-test",
        messages=[from_openai({"role": "user", "content": "What is 12 * 7?"})],
        tools=TOOLS,
        metadata={"recorded_tools": recorded or []},
    )


def _run(sampler, tools, scenario=None, group_size=2, limits=None, max_tokens=64):
    params = SamplingParams(max_tokens=max_tokens)
    loop = AgentLoop(sampler, tools, params=params, limits=limits or RolloutLimits())
    return asyncio.run(loop.run_group(scenario or _scenario(), group_size))


def _assert_token_exact(episode, tokenizer) -> None:
    turns = episode.turns
    for previous, turn in itertools.pairwise(turns):
        prev = previous["prompt_token_ids"] + previous["completion_token_ids"]
        assert turn["prompt_token_ids"][: len(prev)] == prev  # each prompt extends the last
    for turn in turns:
        assert len(turn["logprobs"]) == len(turn["completion_token_ids"])
    assistants = [m for m in episode.messages if m["role"] == "assistant"]
    assert len(assistants) == len(turns)
    for message, turn in zip(assistants, turns, strict=True):
        ids = turn["completion_token_ids"]
        if turn["finish_reason"] == "stop":
            assert ids[-1] == tokenizer.eos_token_id  # the sampled EOS is stored, not a template newline
            ids = ids[:-1]
        text = tokenizer.decode(ids, skip_special_tokens=False)
        assert message["content"] in text
        for call in message["tool_calls"]:
            assert call["arguments"] in text or json.loads(call["arguments"]) == json.loads(
                text.split('"arguments": ', 1)[1].rsplit("}", 1)[0]
            )


def test_tool_call_then_answer_with_callable_tools(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = CallableTools.from_specs(["tests.training.helpers:calculator"])
    episodes = _run(sampler, tools)
    assert len(episodes) == 2
    # First turn is one request for the whole group (shared prefill), then one per rollout.
    assert [r.n for r in sampler.requests] == [2, 1, 1]
    for episode in episodes:
        assert episode.status == "ok" and episode.finish_reason == "stop"
        assert episode.final_output == 'The answer is {"result": 84}.'
        assert [m["role"] for m in episode.messages] == ["user", "assistant", "tool", "assistant"]
        tool_message = episode.messages[2]
        assert tool_message["name"] == "calculator" and tool_message["is_error"] is False
        assert tool_message["tool_call_id"] == episode.messages[1]["tool_calls"][0]["id"]
        assert episode.tool_calls == 1 and episode.tool_errors == 0
        _assert_token_exact(episode, sampler.tokenizer)
        # The suffix between turns is exactly the rendered tool result + next assistant header.
        first, second = episode.turns
        suffix = second["prompt_token_ids"][
            len(first["prompt_token_ids"]) + len(first["completion_token_ids"]) :
        ]
        assert sampler.tokenizer.decode(suffix) == (
            '\n<|im_start|>user\n<tool_response>\n{"result": 84}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
        )


def test_async_tool_and_named_spec(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = CallableTools.from_specs(["calculator=tests.training.helpers:async_calculator"])
    (episode,) = _run(sampler, tools, group_size=1)
    assert episode.messages[2]["content"] == '{"result": 84}'


def test_tool_that_raises_is_an_error_result_the_model_sees(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = CallableTools.from_specs(["calculator=tests.training.helpers:broken_tool"])
    (episode,) = _run(sampler, tools, group_size=1)
    tool_message = episode.messages[2]
    assert tool_message["is_error"] is True
    assert "RuntimeError: cannot evaluate 12 * 7" in tool_message["content"]
    assert episode.status == "ok" and episode.tool_errors == 1
    assert "cannot evaluate" in episode.final_output  # the model saw the error text


def test_recorded_tools_answer_matching_calls_and_refuse_others(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    recorded = [
        {
            "name": "calculator",
            "arguments": '{"expression":"12 * 7"}',
            "content": "84 (recorded)",
            "is_error": False,
        }
    ]
    (episode,) = _run(sampler, RecordedTools(), scenario=_scenario(recorded), group_size=1)
    assert episode.messages[2]["content"] == "84 (recorded)" and episode.messages[2]["is_error"] is False
    other = [
        {"name": "calculator", "arguments": '{"expression": "1 + 1"}', "content": "2", "is_error": False}
    ]
    (miss,) = _run(sampler, RecordedTools(), scenario=_scenario(other), group_size=1)
    assert miss.messages[2]["is_error"] is True
    assert "no recorded result for `calculator`" in miss.messages[2]["content"]
    assert 'calculator({"expression":"1 + 1"})' in miss.messages[2]["content"]  # lists what was recorded


def test_chain_prefers_callables_then_recordings(tiny_model: Path) -> None:
    recorded = [{"name": "lookup", "arguments": "{}", "content": "x"}]
    tools = make_tools(["tests.training.helpers:calculator"], recorded=True)
    assert isinstance(tools, ChainTools)
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    (episode,) = _run(sampler, tools, scenario=_scenario(recorded), group_size=1)
    assert episode.messages[2]["content"] == '{"result": 84}'


@pytest.mark.parametrize(
    "bad",
    [
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 *\n</tool_call>',  # bad JSON
        '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "calculator", "argum',  # never closed
    ],
)
def test_malformed_tool_call_is_a_failed_call_not_a_crash(tiny_model: Path, bad: str) -> None:
    def script(prompt: str) -> str:
        text = prompt.partition("\x00")[0]
        return bad if "<tool_response>" not in text else "Sorry, let me answer directly: 84."

    sampler = ScriptedSampler(str(tiny_model), script)
    (episode,) = _run(sampler, CallableTools.from_specs(["tests.training.helpers:calculator"]), group_size=1)
    assert episode.status == "ok" and episode.final_output == "Sorry, let me answer directly: 84."
    call = episode.messages[1]["tool_calls"][0]
    tool_message = episode.messages[2]
    assert tool_message["is_error"] is True and tool_message["tool_call_id"] == call["id"]
    assert tool_message["content"].startswith("error: malformed tool call (")
    assert episode.tool_errors == 1
    _assert_token_exact(episode, sampler.tokenizer)


def test_turn_limit_truncates(tiny_model: Path) -> None:
    def always_call(prompt):
        return '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 1"}}\n</tool_call>'

    sampler = ScriptedSampler(str(tiny_model), always_call)
    tools = CallableTools.from_specs(["tests.training.helpers:calculator"])
    (episode,) = _run(sampler, tools, group_size=1, limits=RolloutLimits(max_turns=3))
    assert episode.status == "truncated" and episode.finish_reason == "max_turns"
    assert len(episode.turns) == 3
    _assert_token_exact(episode, sampler.tokenizer)


def test_token_limits_truncate(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), lambda p: "word " * 100)
    (episode,) = _run(sampler, RecordedTools(), group_size=1, max_tokens=10)
    assert episode.status == "truncated" and episode.finish_reason == "length"
    assert len(episode.turns[0]["completion_token_ids"]) == 10
    assert episode.final_output is None
    # A prompt longer than the context budget: nothing sampled, recorded as truncated.
    episodes = _run(sampler, RecordedTools(), group_size=2, limits=RolloutLimits(max_total_tokens=5))
    assert [e.finish_reason for e in episodes] == ["max_total_tokens"] * 2 and not sampler.requests[1:]


def test_total_token_budget_caps_later_turns(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = CallableTools.from_specs(["tests.training.helpers:calculator"])
    loop = AgentLoop(sampler, tools, params=SamplingParams(max_tokens=64))
    prompt_len = len(loop.renderer.prompt_ids(_scenario().messages, TOOLS))
    limits = RolloutLimits(max_total_tokens=prompt_len + 30)
    (episode,) = _run(sampler, tools, group_size=1, limits=limits)
    for turn in episode.turns:
        assert len(turn["prompt_token_ids"]) + len(turn["completion_token_ids"]) <= prompt_len + 30
    assert episode.status == "truncated"


def test_no_tool_source_answers_every_call_with_an_error(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = make_tools([], recorded=False)
    assert tools.describe() == "none"
    (episode,) = _run(sampler, tools, group_size=1)
    assert episode.messages[2]["is_error"] is True
    assert "no tools are available" in episode.messages[2]["content"]


def test_each_rollout_and_turn_samples_with_its_own_seed(tiny_model: Path) -> None:
    """Every rollout of the group reaches the same turn-2 prompt here; one shared seed would make
    their answers identical on vLLM. Seeds differ per rollout and turn, and repeat run to run."""

    def seeds_of(seed: int | None) -> tuple[int | None, set[int | None]]:
        """The group request's seed, and the later turns' seeds (a set: rollouts race to the sampler)."""
        sampler = ScriptedSampler(str(tiny_model), calculator_script)
        tools = CallableTools.from_specs(["tests.training.helpers:calculator"])
        loop = AgentLoop(sampler, tools, params=SamplingParams(max_tokens=64, seed=seed))
        asyncio.run(loop.run_group(_scenario(), 3))
        first, *later = sampler.requests
        assert first.n == 3 and len(later) == 3 and len({r.prompt_ids for r in later}) == 1
        return first.params.seed, {r.params.seed for r in later}

    first_seed, later_seeds = seeds_of(7)
    assert first_seed == turn_seed(7, "sc-test")
    assert later_seeds == {turn_seed(7, "sc-test", k, 1) for k in range(3)}
    assert len({first_seed, *later_seeds}) == 4
    assert seeds_of(7) == (first_seed, later_seeds)
    assert seeds_of(None) == (None, {None})
    assert turn_seed(8, "sc-test") != first_seed and turn_seed(7, "sc-other") != first_seed
