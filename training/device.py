"""What the training device can do, for choosing defaults that are fast where they run."""

from __future__ import annotations


def bf16_supported() -> bool:
    """Whether bf16 mixed precision can run here (a CUDA device that supports it)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
