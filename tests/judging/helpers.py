"""Small builders for test trajectories and scenarios (after datatrove's `get_doc`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from store.lake import Lake
from store.writer import write

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def msg(role: str, content: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def make_traj(
    trajectory_id: str,
    answer: str,
    *,
    group_id: str | None = None,
    scenario_id: str | None = None,
    prompt: str = "What is the capital of France?",
    middle: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A trajectory: system + user prompt (shared by a group), optional middle messages, final answer."""
    messages = [
        msg("system", "You are a helpful agent."),
        msg("user", prompt),
        *(middle or []),
        msg("assistant", answer),
    ]
    return {
        "trajectory_id": trajectory_id,
        "source": "replay",
        "started_at": T0,
        "messages": messages,
        "final_output": answer,
        "group_id": group_id,
        "scenario_id": scenario_id,
        **extra,
    }


def make_group(
    group_id: str, answers: list[str], *, scenario_id: str | None = None, prompt: str | None = None
) -> list[dict[str, Any]]:
    """One replayed group: trajectories `<group_id>-<i>` sharing a prompt."""
    return [
        make_traj(
            f"{group_id}-{i}",
            answer,
            group_id=group_id,
            scenario_id=scenario_id,
            prompt=prompt or f"Task of {group_id}: answer well.",
        )
        for i, answer in enumerate(answers)
    ]


def make_scenario(scenario_id: str, expected: str | None) -> dict[str, Any]:
    return {
        "scenario_id": scenario_id,
        "messages": [msg("user", "What is the capital of France?")],
        "expected": expected,
        "split": "train",
        "created_at": T0,
    }


def good_answers(n: int) -> list[str]:
    """Answers whose rule score (count of "good" / 4) is distinct and known: 0, 0.25, 0.5, ..."""
    return [" ".join(["good"] * (i % 5)) + f" answer {i}" for i in range(n)]


def write_groups(lake: Lake, n_groups: int, size: int = 4, prefix: str = "g") -> list[dict[str, Any]]:
    rows = [t for g in range(n_groups) for t in make_group(f"{prefix}{g:03d}", good_answers(size))]
    write(lake, "trajectories", rows)
    return rows
