"""What a reward function sees: a trajectory row and its scenario row, as plain dicts.

Reward functions take `(trajectory, scenario)`: the trajectory is one row of the lake's
`trajectories` view as a dict (`messages` is a list of message dicts with `role`,
`content`, `name`, `tool_call_id`, `tool_calls`, `is_error`; JSON columns stay JSON
text; `turns` only when the run asks for them); the scenario is its `scenarios` row, or
None when the trajectory has no scenario. These helpers read the fields rewards need
most, so reward functions stay a few lines long.

>>> traj = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
>>> final_answer(traj)
'4'
>>> expected_answer({"expected": '{"answer": "4"}'})
'4'
"""

from __future__ import annotations

import json
from typing import Any

from judging.errors import RewardInputError

Trajectory = dict[str, Any]
ScenarioRow = dict[str, Any]

# Keys of an `expected` JSON object that hold the expected final answer, in order of preference.
ANSWER_KEYS = ("answer", "output", "final_output", "expected")


def messages_of(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's messages (an empty list when there are none)."""
    return list(trajectory.get("messages") or [])


def final_answer(trajectory: Trajectory) -> str | None:
    """`final_output` when set, else the content of the last assistant message with text."""
    output = trajectory.get("final_output")
    if output is not None:
        return str(output)
    for message in reversed(messages_of(trajectory)):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return None


def parse_expected(scenario: ScenarioRow | None) -> Any:
    """The scenario's `expected` JSON, parsed; raises `RewardInputError(no_expected)` when absent."""
    raw = (scenario or {}).get("expected")
    if raw is None or raw == "":
        sid = (scenario or {}).get("scenario_id")
        raise RewardInputError(
            "no_expected",
            f"scenario `{sid}` has no `expected` output to compare with"
            if sid
            else "the trajectory has no scenario, so there is no `expected` output to compare with",
        )
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        # Plain text in `expected` is taken as the answer itself.
        return raw


def expected_answer(scenario: ScenarioRow | None) -> Any:
    """The expected final answer: `expected` itself, or its `answer`/`output`/... key when it is an object.

    A list means "any of these answers is correct".
    """
    expected = parse_expected(scenario)
    if isinstance(expected, dict):
        for key in ANSWER_KEYS:
            if key in expected:
                return expected[key]
        raise RewardInputError(
            "no_expected_answer",
            f"`expected` has no answer key; looked for {', '.join(ANSWER_KEYS)}, found {', '.join(expected) or 'none'}",
        )
    return expected


def assistant_turns(trajectory: Trajectory) -> int:
    """Number of assistant messages (model turns)."""
    return sum(1 for m in messages_of(trajectory) if m.get("role") == "assistant")


def tool_results(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The tool-result messages (`role = 'tool'`)."""
    return [m for m in messages_of(trajectory) if m.get("role") == "tool"]


def tool_calls(trajectory: Trajectory) -> list[dict[str, Any]]:
    """Every tool call the assistant made, in order."""
    return [
        c
        for m in messages_of(trajectory)
        if m.get("role") == "assistant"
        for c in (m.get("tool_calls") or [])
    ]


def output_tokens(trajectory: Trajectory, chars_per_token: float = 4.0) -> int:
    """Tokens the model produced: token data when stored, `output_tokens`, else a chars/4 estimate."""
    turns = trajectory.get("turns")
    if turns:
        return sum(len(t.get("completion_token_ids") or []) for t in turns)
    if trajectory.get("output_tokens") is not None:
        return int(trajectory["output_tokens"])
    chars = sum(
        len(m.get("content") or "") + sum(len(c.get("arguments") or "") for c in (m.get("tool_calls") or []))
        for m in messages_of(trajectory)
        if m.get("role") == "assistant"
    )
    return round(chars / chars_per_token)
