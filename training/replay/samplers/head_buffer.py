"""The LM head's output written into one buffer that a decoder's steps reuse (on a CPU).

A decode step's logits are rows x vocabulary floats, past the size glibc maps afresh for every
allocation; `decode_loop.Decoder` hands its steps' forwards a `HeadBuffer` so they are not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

#: glibc's malloc serves a block this large or larger with a fresh `mmap` (the most its dynamic
#: mmap threshold rises to; only turning mmap off changes that), so each such tensor page-faults
#: its zeroed memory again.
MMAP_THRESHOLD_MAX = 32 << 20


class HeadBuffer:
    """One buffer the LM head's output goes to in a decoder's steps, reused step after step.

    A decode step's logits are rows x vocabulary floats: 75 MB at 384 SmolLM2 rows, which glibc
    maps afresh for every step (`MMAP_THRESHOLD_MAX`). Faulting in those pages took ~17 ms a step
    on a 2-core AMD EPYC (~2% of it). Here a step's head writes
    into one buffer (`torch.mm(..., out=)`, the kernel `F.linear` calls: the same products as
    the packed head at these row counts); smaller outputs, a 16-bit head, a head with a bias or
    an adapter of its own, and heads off a CPU (whose allocators cache) run as they are. A step's
    logits are read (`SeededSampling.choose`) before the next step overwrites them."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    @contextlib.contextmanager
    def writing(self, model: Any) -> Iterator[None]:
        """Within: `model`'s LM head writes large float32 outputs into this buffer."""
        head = model.get_output_embeddings()
        if (
            type(head) is not torch.nn.Linear
            or head.bias is not None
            or head.weight.dtype != torch.float32
            or head.weight.device.type != "cpu"
        ):
            yield
            return
        weight, replaced = head.weight, vars(head).get("forward")  # `packed.PackedLinears` may have set one
        own_forward = replaced or head.forward

        def into_buffer(x: torch.Tensor) -> torch.Tensor:
            rows = x.numel() // x.shape[-1]
            if (
                rows * weight.shape[0] * weight.element_size() < MMAP_THRESHOLD_MAX
                or x.dtype != weight.dtype
                or torch.is_grad_enabled()
            ):
                return own_forward(x)  # type: ignore[no-any-return]
            if self._buffer is None or len(self._buffer) < rows:
                self._buffer = torch.empty((rows, weight.shape[0]), dtype=weight.dtype)
            out = torch.mm(x.reshape(rows, x.shape[-1]), weight.t(), out=self._buffer[:rows])
            return out.view(*x.shape[:-1], weight.shape[0])

        head.forward = into_buffer
        try:
            yield
        finally:
            if replaced is None:
                del head.forward
            else:
                head.forward = replaced
