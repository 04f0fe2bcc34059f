"""Rewards on the form of the output.

>>> valid_json_reward({"final_output": '{"ok": true}'}, None)
1.0
>>> valid_json_reward({"final_output": "```json\\n[1, 2]\\n```"}, None)
1.0
>>> valid_json_reward({"final_output": "{'ok': True}"}, None)  # Python repr, not JSON
0.0
"""

from __future__ import annotations

import json
import re

from judging.rewards.base import reward_version
from judging.trajectory import ScenarioRow, Trajectory, final_answer

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


@reward_version("1")
def valid_json_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
    """1.0 when the final answer is a JSON object or array (a single ```json fence is allowed), else 0.0.

    Bare scalars (`3`, `"x"`) do not count: an agent asked for JSON output means structure.
    """
    answer = final_answer(trajectory)
    if answer is None:
        return 0.0
    fenced = _FENCE.match(answer)
    text = fenced.group(1) if fenced else answer
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return 0.0
    return 1.0 if isinstance(value, (dict, list)) else 0.0
