"""Group-relative advantages for GRPO, computed once in the data pipeline.

GRPO replaces a learned value baseline with the other samples of the same prompt
(Shao et al. 2024, DeepSeekMath): the advantage of trajectory i in group g is

    A_i = (r_i - mean_g(r)) / (std(r) + eps)

where ``std`` is the group's standard deviation (``scale_rewards="group"``), the whole
batch's (``"batch"``, Liu et al. 2025 argue per-group scaling biases towards easy or
hard prompts), or 1 (``"none"``, Dr. GRPO). Means and standard deviations follow TRL's
`GRPOTrainer` exactly (sample std with Bessel's correction, eps = 1e-4), so that training
on stored groups gives the same advantages TRL would have computed online.

Because rewards are already stored, advantages are a pure function of (group, reward)
pairs and are precomputed here rather than inside the trainer. Groups whose rewards are
all equal get zero advantage and teach nothing; they are counted and reported (never
silently dropped) so a user sees when a judge or reward stopped discriminating.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from training.errors import BadHyperparameter

ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
DEFAULT_EPS = 1e-4  # TRL's GRPOTrainer constant


@dataclass(frozen=True)
class AdvantageReport:
    """What `compute_advantages` saw: how many groups, and which ones carry no signal."""

    groups: int
    trajectories: int
    equal_reward_groups: list[str] = field(default_factory=list)
    reward_mean: float = 0.0
    reward_std: float = 0.0

    @property
    def equal_reward_fraction(self) -> float:
        return len(self.equal_reward_groups) / self.groups if self.groups else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def sample_std(values: Sequence[float]) -> float:
    """Standard deviation with Bessel's correction (0 for fewer than two values), as TRL's `nanstd`."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def is_equal_reward_group(rewards: Sequence[float], *, tol: float = 1e-8) -> bool:
    """True when a group's rewards are all the same: every advantage in it is zero.

    >>> is_equal_reward_group([1.0, 1.0, 1.0]), is_equal_reward_group([0.0, 1.0])
    (True, False)
    """
    return max(rewards) - min(rewards) <= tol


def compute_advantages(
    group_ids: Sequence[str],
    rewards: Sequence[float],
    *,
    scale_rewards: ScaleRewards = "group",
    eps: float = DEFAULT_EPS,
) -> tuple[list[float], AdvantageReport]:
    """Advantage of every trajectory relative to its group, plus a report of the groups.

    `group_ids[i]` and `rewards[i]` describe trajectory i; groups may be interleaved.

    >>> adv, report = compute_advantages(["a", "a", "b", "b"], [1.0, 0.0, 0.5, 0.5])
    >>> [round(x, 3) for x in adv], report.equal_reward_groups
    ([0.707, -0.707, 0.0, 0.0], ['b'])
    """
    if scale_rewards not in SCALE_REWARDS:
        raise BadHyperparameter(
            f"`scale_rewards` must be one of {', '.join(SCALE_REWARDS)}; got `{scale_rewards}`",
            field="scale_rewards",
            value=scale_rewards,
        )
    if not eps > 0:
        raise BadHyperparameter(
            f"`eps` must be positive (it keeps equal-reward groups finite); got `{eps}`",
            field="eps",
            value=eps,
        )
    if len(group_ids) != len(rewards):
        raise BadHyperparameter(
            f"`group_ids` and `rewards` differ in length ({len(group_ids)} vs {len(rewards)})",
            field="rewards",
            value=len(rewards),
        )
    bad = [i for i, r in enumerate(rewards) if r is None or not math.isfinite(r)]
    if bad:
        raise BadHyperparameter(
            f"reward of trajectory #{bad[0]} in group `{group_ids[bad[0]]}` is `{rewards[bad[0]]}`; "
            "rewards must be finite numbers (failed scores are filtered out by the selection)",
            field="rewards",
            value=rewards[bad[0]],
        )
    if not rewards:
        return [], AdvantageReport(groups=0, trajectories=0)

    members: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)

    batch_std = sample_std(rewards)
    advantages = [0.0] * len(rewards)
    equal: list[str] = []
    for gid, idx in members.items():
        values = [rewards[i] for i in idx]
        mean = _mean(values)
        if scale_rewards == "group":
            scale = sample_std(values) + eps
        elif scale_rewards == "batch":
            scale = batch_std + eps
        else:
            scale = 1.0
        for i in idx:
            advantages[i] = (rewards[i] - mean) / scale
        if is_equal_reward_group(values):
            equal.append(gid)
    report = AdvantageReport(
        groups=len(members),
        trajectories=len(rewards),
        equal_reward_groups=equal,
        reward_mean=_mean(rewards),
        reward_std=batch_std,
    )
    return advantages, report
