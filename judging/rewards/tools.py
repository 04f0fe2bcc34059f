"""Rewards on tool use.

>>> ok = {"role": "tool", "content": "42", "is_error": False}
>>> bad = {"role": "tool", "content": "boom", "is_error": True}
>>> tool_success_reward({"messages": [ok, bad]}, None)
0.5
"""

from __future__ import annotations

from judging.rewards.base import reward_version
from judging.trajectory import ScenarioRow, Trajectory, tool_calls, tool_results


@reward_version("1")
def tool_success_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
    """Share of tool calls whose result did not fail (`is_error`); 1.0 when no tool was called.

    A call without any result message counts as failed: the agent never got an answer.
    """
    results = tool_results(trajectory)
    calls = tool_calls(trajectory)
    answered = {r.get("tool_call_id") for r in results if r.get("tool_call_id")}
    unanswered = sum(1 for c in calls if c.get("id") and c["id"] not in answered)
    total = len(results) + unanswered
    if total == 0:
        return 1.0
    ok = sum(1 for r in results if not r.get("is_error"))
    return ok / total
