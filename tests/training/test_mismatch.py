"""Sampler/trainer mismatch maths on hand-made tensors: the gap, TIS weights in TRL's four modes."""

from __future__ import annotations

import math

import pytest
import torch

from training.mismatch import importance_weights, sampler_gap, weighted_advantages

TRAINER = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, -3.0, 0.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the last column: a tool result, never sampled


def test_gap_is_over_sampled_tokens_only() -> None:
    mean, high = sampler_gap(TRAINER, SAMPLER, MASK)
    assert mean == pytest.approx((0.5 + 1.0) / 4) and high == pytest.approx(1.0)
    unscored = SAMPLER.clone()
    unscored[0, 0] = float("nan")  # a sampler that could not score a token: left out, not a NaN mean
    assert sampler_gap(TRAINER, unscored, MASK) == pytest.approx((1.0 / 3, 1.0))
    assert sampler_gap(TRAINER, SAMPLER, torch.zeros_like(MASK)) == (0.0, 0.0)


def test_token_truncate_caps_each_token() -> None:
    w = importance_weights(TRAINER, SAMPLER, MASK, mode="token_truncate", clip_max=1.5)
    assert w.shape == TRAINER.shape
    # e^0.5 = 1.65 is capped at 1.5; e^-1 = 0.37 is kept (truncation is one-sided by default)
    assert w[0].tolist() == pytest.approx([1.5, math.exp(-1.0), 1.0])
    assert w[1].tolist() == pytest.approx([1.0, 1.0, 1.0])  # the sampler was the trainer


def test_token_mask_zeroes_tokens_outside_the_band() -> None:
    w = importance_weights(TRAINER, SAMPLER, MASK, mode="token_mask", clip_min=0.5, clip_max=1.5)
    assert w[0].tolist() == pytest.approx([0.0, 0.0, 1.0])  # 1.65 > 1.5 and 0.37 < 0.5: both dropped


@pytest.mark.parametrize(("mode", "expected"), [("sequence_truncate", 0.8), ("sequence_mask", 0.0)])
def test_sequence_modes_weigh_the_whole_completion(mode: str, expected: float) -> None:
    w = importance_weights(TRAINER, SAMPLER, MASK, mode=mode, clip_min=0.8, clip_max=3.0)
    assert w.shape == (2, 1)
    # row 0: exp(0.5 - 1.0) = 0.61, below 0.8: raised to 0.8 (truncate) or dropped (mask)
    assert w[0, 0].item() == pytest.approx(expected)
    assert w[1, 0].item() == pytest.approx(1.0)


def test_weights_multiply_each_rows_advantage() -> None:
    weights = torch.tensor([[0.5, 2.0, 1.0], [1.0, 1.0, 1.0]])
    out = weighted_advantages(torch.tensor([2.0, -1.0]), weights)
    assert out.tolist() == [[1.0, 4.0, 2.0], [-1.0, -1.0, -1.0]]
