"""Penalties for long trajectories: values in [-1, 0], meant to be combined with a task reward.

Both are factories, like TRL's `get_repetition_penalty_reward`: the registry holds one
instance with the default parameters (`turn_penalty`, `length_penalty`); build others
with your own limits. Below the free allowance the penalty is 0; it grows linearly to
-1 at the limit and stays there.

>>> penalty = get_turn_penalty_reward(free_turns=1, max_turns=3)
>>> assistant = {"role": "assistant", "content": "..."}
>>> penalty({"messages": [assistant] * 2}, None)
-0.5
"""

from __future__ import annotations

from judging.errors import ConfigValueError
from judging.rewards.base import RewardFn, reward_version
from judging.trajectory import ScenarioRow, Trajectory, assistant_turns, output_tokens


def _linear_penalty(amount: float, free: float, limit: float) -> float:
    over = max(0.0, amount - free)
    return -min(1.0, over / (limit - free))


def get_turn_penalty_reward(free_turns: int = 4, max_turns: int = 16) -> RewardFn:
    """Penalty on assistant turns: 0 up to `free_turns`, -1 at `max_turns` and beyond."""
    if free_turns < 0 or max_turns <= free_turns:
        raise ConfigValueError(
            f"need 0 <= free_turns < max_turns, got {free_turns} and {max_turns}",
            field="max_turns",
            value=max_turns,
        )

    @reward_version(f"1-free{free_turns}-max{max_turns}")
    def turn_penalty_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
        return _linear_penalty(assistant_turns(trajectory), free_turns, max_turns)

    return turn_penalty_reward


def get_length_penalty_reward(free_tokens: int = 1024, max_tokens: int = 4096) -> RewardFn:
    """Penalty on generated tokens (token data, else `output_tokens`, else chars/4): 0 up to `free_tokens`."""
    if free_tokens < 0 or max_tokens <= free_tokens:
        raise ConfigValueError(
            f"need 0 <= free_tokens < max_tokens, got {free_tokens} and {max_tokens}",
            field="max_tokens",
            value=max_tokens,
        )

    @reward_version(f"1-free{free_tokens}-max{max_tokens}")
    def length_penalty_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
        return _linear_penalty(output_tokens(trajectory), free_tokens, max_tokens)

    return length_penalty_reward
