"""The sampler/trainer mismatch: the gap between stored and recomputed logprobs, and its correction.

GRPO on stored groups uses the logprobs the sampler stored as pi_old of the clipped
ratio pi_theta / pi_old. When the sampler computes different numbers than the trainer
for the same weights (vLLM's kernels, bf16, another batch shape), that ratio is off by
the mismatch before any update, and the clip then fights noise rather than policy drift.
Truncated importance sampling (TIS, Yao et al. 2025; TRL's
`vllm_importance_sampling_correction`, verl's rollout correction) decouples the two:

- pi_old becomes the trainer's own logprobs of the stored tokens, taken before the
  round's first update, so the clipped ratio measures only what the optimiser changed;
- each token's advantage is weighted by w = pi_old / pi_sampler (per token, or the
  product over the sequence), truncated at `clip_max` (`*_truncate`) or zeroed outside
  `[clip_min, clip_max]` (`*_mask`), so a token the sampler over-sampled counts less.

The weight multiplies the advantage rather than the loss (TRL multiplies the loss only
when it samples with vLLM itself): for w >= 0, -min(r A w, clip(r) A w) = w * -min(r A,
clip(r) A), the same objective. These are pure tensor functions, tested on hand-made
tensors; `training.grpo` calls them.
"""

from __future__ import annotations

import math

import torch

SEQUENCE_MODES = ("sequence_truncate", "sequence_mask")


def sampler_gap(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor
) -> tuple[float, float]:
    """(mean, max) of |trainer - sampler| logprob over the tokens `mask` keeps; (0, 0) when none.

    >>> sampler_gap(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]]), torch.tensor([[1, 1]]))
    (0.25, 0.5)
    """
    return gap_from_totals(sampler_gap_totals(trainer_logps, sampler_logps, mask)[None])


def sampler_gap_totals(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """[sum, count, max] of |trainer - sampler| over the kept tokens: what ranks gather before
    `gap_from_totals`, so a data-parallel run logs the gap of the whole batch."""
    keep = mask.bool()
    delta = (trainer_logps - sampler_logps).abs()[keep].float()
    delta = delta[~torch.isnan(delta)]  # a sampler that could not score a token stores NaN: not a gap
    if delta.numel() == 0:
        return torch.zeros(3, device=trainer_logps.device)
    return torch.stack([delta.sum(), torch.tensor(float(delta.numel()), device=delta.device), delta.max()])


def gap_from_totals(totals: torch.Tensor) -> tuple[float, float]:
    """(mean, max) from rows of [sum, count, max] (one per rank)."""
    count = float(totals[:, 1].sum())
    return (float(totals[:, 0].sum()) / count, float(totals[:, 2].max())) if count else (0.0, 0.0)


def importance_weights(
    trainer_logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "token_truncate",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> torch.Tensor:
    """The TIS weights pi_trainer / pi_sampler: (B, T) per token, or (B, 1) per sequence.

    Masked tokens (prompt padding, tool results) contribute a log-ratio of 0, so their
    weight is 1 and a sequence's weight is the product over its sampled tokens only.

    >>> w = importance_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-2.0, -1.0]]), torch.ones(1, 2))
    >>> [round(v, 3) for v in w[0].tolist()]  # e^2 truncated at 3; equal logprobs weigh 1
    [3.0, 1.0]
    """
    log_ratio = torch.nan_to_num((trainer_logps - sampler_logps) * mask, nan=0.0)
    if mode in SEQUENCE_MODES:
        log_ratio = log_ratio.sum(dim=-1, keepdim=True)
    ratio = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else -math.inf
    high = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def weighted_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-token advantages (B, T): each row's advantage times its tokens' (or sequence's) weight.

    >>> weighted_advantages(torch.tensor([1.0, -2.0]), torch.tensor([[0.5, 1.0], [1.0, 2.0]])).tolist()
    [[0.5, 1.0], [-2.0, -4.0]]
    """
    per_row = advantages if advantages.dim() == 2 else advantages.unsqueeze(1)
    return per_row * weights
