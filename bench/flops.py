"""What share of the CPU's (or GPU's) matmul peak a benchmark's model work used.

`flop_share` = model FLOPs / wall seconds / the `torch.mm` fp32 peak measured in the same
process, on the same thread count: 2 x parameters per token forwarded (6 x for forward +
backward). The peak is the best of a few timed square matmuls large enough to saturate
the cores; measured before and after the workload, the higher is used, so load from other
processes lowers the share rather than the peak.
"""

from __future__ import annotations

import time
from typing import Any


def matmul_peak(size: int = 2048, repeats: int = 5, dtype: Any = None) -> float:
    """FLOP/s of the fastest of `repeats` `torch.mm` (fp32, or `dtype`) of two `size` x `size` matrices."""
    import torch

    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)  # warm-up: threads, allocator
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def parameters(model: Any, *, lora: bool = True) -> int:
    """Parameters a token's forward multiplies by (tied embeddings once; LoRA's unless `lora` is
    False, as for a forward through an adapter merged into the weights)."""
    return sum(p.numel() for name, p in model.named_parameters() if lora or "lora_" not in name)


class TokenCounter:
    """Counts the token positions a decoder's forward computes, by a pre-hook on its base module:
    `padded` every position fed, `real` those the attention mask keeps (padding excluded)."""

    def __init__(self, module: Any) -> None:
        self.padded = 0
        self.real = 0
        self._handle = module.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        rows, width = ids.shape[0], ids.shape[1]
        self.padded += rows * width
        mask = kwargs.get("attention_mask")
        self.real += int(mask[:, -width:].sum()) if mask is not None and mask.dim() == 2 else rows * width

    def reset(self) -> None:
        self.padded = self.real = 0

    def close(self) -> None:
        self._handle.remove()
