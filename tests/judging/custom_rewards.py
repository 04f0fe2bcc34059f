"""Reward functions referenced by import path in the tests (`tests.judging.custom_rewards:...`)."""

from __future__ import annotations

from typing import Any

from judging.rewards.base import reward_version


@reward_version("7")
def answer_length_reward(trajectory: dict[str, Any], scenario: dict[str, Any] | None) -> float:
    return min(1.0, len(trajectory.get("final_output") or "") / 40)


def quality_parts_reward(trajectory: dict[str, Any], scenario: dict[str, Any] | None) -> dict[str, float]:
    text = trajectory.get("final_output") or ""
    return {"good": float(text.count("good")), "short": 1.0 if len(text) < 20 else 0.0}


def exploding_reward(trajectory: dict[str, Any], scenario: dict[str, Any] | None) -> float:
    if trajectory["trajectory_id"] in ("g1-1", "g2-1", "g-1"):
        raise RuntimeError("tool database offline")
    return 1.0


def nan_reward(trajectory: dict[str, Any], scenario: dict[str, Any] | None) -> float:
    return float("nan")


NOT_A_FUNCTION = 3
