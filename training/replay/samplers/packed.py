"""Linear layers on weights packed once for MKL's float32 GEMM (the transformers sampler on a CPU).

On a CPU, `F.linear` in float32 is MKL's `sgemm`, which copies the weight into its kernel's
blocked layout on every call. MKL's packed API does that once (`cblas_sgemm_pack`) and
multiplies from the packed copy (`cblas_sgemm_compute`); PyTorch exposes it as
`mkl::_mkl_reorder_linear_weight` and `mkl::_mkl_linear`, the kernels inductor's weight
freezing uses for float32 linear layers on a CPU. On a 2-core Intel Xeon, idle, the projections
and LM head of one SmolLM2 forward took 448 ms against 494 at 384 rows and 183 against 219 at
128; a replay round shaped like the demo's generated 298.4 tokens/s against 275.3
(`bench/replay.py --split-packing`, docs/performance.md).

`PackedLinears.forwarding(model)` is a context in which each float32 `nn.Linear` of `model` on
a CPU multiplies through its packed weight. Packs are kept per weight tensor (weakly: a merged
adapter's weights are new tensors, packed at first use, and dropped with them), and packed
again if a weight is written in place. A packed weight serves any number of rows: the packed
layout of the weight (MKL's `B` matrix) does not depend on the rows it is multiplied with,
which `_packing_holds` checks once per weight shape against `F.linear` on this machine (a
shape that fails keeps `F.linear`). The products equal `F.linear`'s up to the rounding of
another summation order (bit for bit at the 300 to 5,000 rows tried on one Xeon).
The cost is memory: MKL's packed copy of a weight is about twice its size resident (SmolLM2
in float32: 1.2 GB more while sampling).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial
from typing import Any

import torch
from torch.utils.weak import WeakTensorKeyDictionary

#: Row counts the packed product is checked at against `F.linear`: one, a few, a decode batch's tail, a batch.
_CHECK_ROWS = (1, 5, 40, 200)


def available() -> bool:
    """Whether this torch build has MKL's packed float32 GEMM."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


class PackedLinears:
    """The packed copies of float32 linear weights a sampler's model multiplies through."""

    def __init__(self) -> None:
        self._packs = WeakTensorKeyDictionary()  # weight -> (its `_version` when packed, the pack)
        self._holds: dict[tuple[int, int], bool] = {}  # weight shape -> `_packing_holds`

    @contextlib.contextmanager
    def forwarding(self, model: Any) -> Iterator[None]:
        """Within: `model`'s float32 CPU `nn.Linear`s multiply through packed weights."""
        layers = [
            module
            for module in model.modules()
            if isinstance(module, torch.nn.Linear)
            and module.weight.dtype == torch.float32
            and module.weight.device.type == "cpu"
            and "forward" not in vars(module)  # an instance whose forward a library replaced keeps it
        ]
        for module in layers:
            module.forward = partial(self._forward, module)  # type: ignore[method-assign]  # this instance only
        try:
            yield
        finally:
            for module in layers:
                del module.forward  # the class's forward again

    def _forward(self, module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        weight, bias = module.weight, module.bias
        packed = self._pack(weight) if x.dtype == torch.float32 and not torch.is_grad_enabled() else None
        if packed is None:
            return torch.nn.functional.linear(x, weight, bias)
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        return torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)

    def _pack(self, weight: torch.Tensor) -> torch.Tensor | None:
        version = 0 if weight.is_inference() else weight._version  # inference tensors count no writes
        entry = self._packs.get(weight)
        if entry is not None and entry[0] == version:
            return entry[1]
        shape = (weight.shape[0], weight.shape[1])
        holds = self._holds.get(shape)
        if holds is False:
            return None
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), _CHECK_ROWS[-1])
        if holds is None:  # the first weight of this shape: its own pack is what is checked
            self._holds[shape] = holds = _packing_holds(weight, packed)
            if not holds:
                return None
        self._packs[weight] = (version, packed)
        return packed


def _packing_holds(weight: torch.Tensor, packed: torch.Tensor) -> bool:
    """Whether `packed`, one pack of `weight`, multiplies any number of rows as `F.linear` does
    (to float32 rounding): the packed kernel is used at every row count, not only the one
    packed for."""
    with torch.inference_mode():
        generator = torch.Generator().manual_seed(0)
        for rows in _CHECK_ROWS:
            x = torch.randn(rows, weight.shape[1], generator=generator)
            got = torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)
            want = torch.nn.functional.linear(x, weight)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max())):
                return False
    return True
