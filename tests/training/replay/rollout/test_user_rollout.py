"""User rollout functions driven through the OpenAI-compatible app, recorded token-exactly."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from store.messages import from_openai
from tests.training.helpers import TOOLS, ScriptedSampler, calculator_script
from training.replay.errors import ToolSourceError
from training.replay.rollout.episodes import Recorder
from training.replay.rollout.loop import RolloutLimits, turn_seed
from training.replay.rollout.user import UserRollouts
from training.replay.samplers.base import SamplingParams
from training.replay.scenarios import Scenario


def _scenario() -> Scenario:
    return Scenario(
        scenario_id="sc-user",
        messages=[
            from_openai({"role": "system", "content": "You are a careful math assistant."}),
            from_openai({"role": "user", "content": "What is 12 * 7?"}),
        ],
        tools=TOOLS,
    )


def _group(tiny_model: Path, spec: str, group_size: int = 2, limits: RolloutLimits | None = None):
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    runner = UserRollouts(sampler, spec, params=SamplingParams(max_tokens=64), limits=limits)
    try:
        return sampler, asyncio.run(runner.run_group(_scenario(), group_size))
    finally:
        runner.close()


@pytest.mark.parametrize(
    "spec",
    [
        "tests.training.replay.rollout.user_agents:async_agent",
        "tests.training.replay.rollout.user_agents:sync_agent",
    ],
)
def test_openai_sdk_agent_is_recorded_token_exactly(tiny_model: Path, spec: str) -> None:
    sampler, episodes = _group(tiny_model, spec)
    tokenizer = sampler.tokenizer
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.status == "ok", episode.error
        assert episode.finish_reason == "stop"  # every call extended the previous one
        assert episode.final_output == 'The answer is {"result": 84}.'
        assert len(episode.turns) == 2
        first, second = episode.turns
        assert second["prompt_token_ids"][
            : len(first["prompt_token_ids"]) + len(first["completion_token_ids"])
        ] == (first["prompt_token_ids"] + first["completion_token_ids"])
        assert first["completion_token_ids"][-1] == tokenizer.eos_token_id
        assert tokenizer.decode(second["completion_token_ids"][:-1]) == episode.final_output
        roles = [m["role"] for m in episode.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert episode.messages[2]["tool_calls"][0]["name"] == "calculator"


def test_agent_failure_and_turn_limit_are_recorded(tiny_model: Path) -> None:
    _, (failed,) = _group(tiny_model, "tests.training.replay.rollout.user_agents:failing_agent", group_size=1)
    assert failed.status == "error" and "agent crashed after one call" in failed.error
    assert len(failed.turns) == 1  # the call it made is still recorded
    _, (looped,) = _group(
        tiny_model,
        "tests.training.replay.rollout.user_agents:looping_agent",
        group_size=1,
        limits=RolloutLimits(max_turns=3),
    )
    assert looped.status == "truncated" and looped.finish_reason == "max_turns" and len(looped.turns) == 3


def test_bad_rollout_path_names_the_problem(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    with pytest.raises(ToolSourceError, match="no attribute `nope`"):
        UserRollouts(sampler, "tests.training.replay.rollout.user_agents:nope")
    with pytest.raises(ToolSourceError, match="not an import path"):
        UserRollouts(sampler, "just_a_name")


def test_seeded_user_rollouts_repeat_and_every_call_has_its_own_seed(tiny_model: Path) -> None:
    """Seeds come from the scenario, rollout index and call index, never from the random episode id."""

    def seeds() -> list[int | None]:
        sampler = ScriptedSampler(str(tiny_model), calculator_script)
        runner = UserRollouts(
            sampler, "tests.training.replay.rollout.user_agents:async_agent", params=SamplingParams(seed=5)
        )
        try:
            asyncio.run(runner.run_group(_scenario(), 2))
        finally:
            runner.close()
        return sorted(r.params.seed for r in sampler.requests)

    expected = sorted(turn_seed(5, "sc-user", rollout, call) for rollout in range(2) for call in range(2))
    assert seeds() == expected == seeds()
    assert len(set(expected)) == 4


def test_calls_an_episode_makes_at_once_get_different_seeds() -> None:
    recorder = Recorder()
    recorder.start("episode", "sc-user", 1)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: recorder.call_seed("episode", 5), range(32)))
    assert sorted(got) == sorted(turn_seed(5, "sc-user", 1, call) for call in range(32))
    recorder.pop("episode")
    assert recorder.call_seed("episode", 5) == turn_seed(5, "episode", 0, 0)  # forgotten with the episode


def test_a_replay_samples_at_its_own_temperature_whatever_the_agent_asks(tiny_model: Path) -> None:
    # GRPO divides by the temperature the replay records with the group: the agent's 0.2 must not
    # be what sampled the tokens
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    replay_params = SamplingParams(max_tokens=64, temperature=0.9, top_p=0.95)
    runner = UserRollouts(
        sampler, "tests.training.replay.rollout.user_agents:cold_agent", params=replay_params
    )
    try:
        asyncio.run(runner.run_group(_scenario(), 1))
    finally:
        runner.close()
    assert sampler.requests and {(r.params.temperature, r.params.top_p) for r in sampler.requests} == {
        (0.9, 0.95)
    }
