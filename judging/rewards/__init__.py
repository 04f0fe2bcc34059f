"""Built-in programmatic rewards. All share one signature: `fn(trajectory, scenario) -> float | dict[str, float]`."""

from judging.rewards.format import valid_json_reward
from judging.rewards.match import exact_match_reward, normalized_match_reward
from judging.rewards.penalties import get_length_penalty_reward, get_turn_penalty_reward
from judging.rewards.tools import tool_success_reward

__all__ = [
    "exact_match_reward",
    "get_length_penalty_reward",
    "get_turn_penalty_reward",
    "normalized_match_reward",
    "tool_success_reward",
    "valid_json_reward",
]
