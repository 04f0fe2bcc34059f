"""Group-relative advantages: hand-checked values, TRL parity, and the report of equal-reward groups."""

from __future__ import annotations

import math

import pytest
import torch
from trl.trainer.utils import nanstd

from training.advantages import compute_advantages, is_equal_reward_group, sample_std
from training.errors import BadHyperparameter


def test_group_scaling_by_hand() -> None:
    # group a: mean 0.5, sample std sqrt(0.5); group b: all equal -> zero advantages
    adv, report = compute_advantages(["a", "a", "b", "b"], [1.0, 0.0, 0.3, 0.3])
    s = math.sqrt(0.5) + 1e-4
    assert adv == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0])
    assert report.groups == 2 and report.trajectories == 4
    assert report.equal_reward_groups == ["b"]
    assert report.equal_reward_fraction == 0.5


def test_interleaved_groups_keep_positions() -> None:
    adv, _ = compute_advantages(["a", "b", "a", "b"], [1.0, 2.0, 3.0, 2.0], scale_rewards="none")
    assert adv == [-1.0, 0.0, 1.0, 0.0]


def test_batch_scaling_uses_the_whole_batch_std() -> None:
    rewards = [0.0, 1.0, 2.0, 4.0]
    adv, report = compute_advantages(["a", "a", "b", "b"], rewards, scale_rewards="batch")
    std = sample_std(rewards)
    assert adv == pytest.approx(
        [-0.5 / (std + 1e-4), 0.5 / (std + 1e-4), -1 / (std + 1e-4), 1 / (std + 1e-4)]
    )
    assert report.reward_std == pytest.approx(std)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_trl_formula(scale: str) -> None:
    # TRL's GRPOTrainer (sum_then_normalize) on equal-size contiguous groups of 4
    rewards = torch.tensor([0.1, 0.9, 0.4, 0.4, 1.0, 1.0, 1.0, 1.0, 0.0, 0.2, 0.7, 0.3])
    grouped = rewards.view(-1, 4)
    mean = grouped.mean(dim=1).repeat_interleave(4)
    if scale == "group":
        std = nanstd(grouped, dim=1).repeat_interleave(4)
    else:
        std = nanstd(rewards).expand_as(rewards)
    expected = rewards - mean
    if scale != "none":
        expected = expected / (std + 1e-4)
    ids = [f"g{i // 4}" for i in range(12)]
    adv, report = compute_advantages(ids, rewards.tolist(), scale_rewards=scale)  # type: ignore[arg-type]
    assert adv == pytest.approx(expected.tolist(), abs=1e-5)
    assert report.equal_reward_groups == ["g1"]


def test_is_equal_reward_group() -> None:
    assert is_equal_reward_group([0.5, 0.5])
    assert not is_equal_reward_group([0.5, 0.5000001])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"scale_rewards": "median"}, "scale_rewards"),  # not a TRL mode
        ({"eps": 0.0}, "eps"),  # would divide equal-reward groups by zero
    ],
)
def test_bad_settings_are_named(kwargs: dict, name: str) -> None:
    with pytest.raises(BadHyperparameter) as err:
        compute_advantages(["a", "a"], [0.0, 1.0], **kwargs)
    assert err.value.field == name
    assert f"`{name}`" in str(err.value)


def test_non_finite_reward_names_its_group() -> None:
    with pytest.raises(BadHyperparameter, match="group `g7`"):
        compute_advantages(["g7", "g7"], [float("nan"), 1.0])


def test_empty_input() -> None:
    adv, report = compute_advantages([], [])
    assert adv == [] and report.groups == 0
