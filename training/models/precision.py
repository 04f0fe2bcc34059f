"""The precision a sampler loads its model in, and whether this machine multiplies it in hardware."""

from __future__ import annotations

import warnings
from typing import Any


def sampling_dtype(name: str | None, device: str) -> Any:
    """The torch dtype a sampler on `device` loads its model in: `name` (`sampler.dtype`), or by
    default bfloat16 on a GPU and float32 elsewhere. Warns when a CPU would only emulate it."""
    import torch

    dtype = getattr(torch, name) if name else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    if device == "cpu" and not cpu_multiplies_natively(dtype):
        warnings.warn(
            f"sampler.dtype {name}: this CPU has no {name} matmul instructions, so torch emulates "
            "them, slower than float32 (0.3 against 110-127 GFLOP/s on an AVX2-only AMD EPYC); "
            "sample in float32 here",
            stacklevel=3,  # the sampler's caller
        )
    return dtype


def cpu_multiplies_natively(dtype: Any) -> bool:
    """Whether this CPU multiplies `dtype` (a torch dtype) in hardware: float32 always, bfloat16
    with AVX512-BF16 or AMX, float16 with AMX-FP16. Elsewhere torch emulates the 16-bit matmul:
    on a 2-core AMD EPYC (Zen 3, AVX2 only) `torch.mm` of 2,048-square bfloat16 matrices ran at
    0.3 GFLOP/s against 110-127 in float32. Judged on x86 only, by the checks torch's inductor
    uses; another architecture (or a torch without those checks) counts as native."""
    import platform

    import torch

    def has(check: str) -> bool:
        return bool(getattr(torch.cpu, check, lambda: True)())

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    if dtype == torch.bfloat16:
        return has("_is_avx512_bf16_supported") or has("_is_amx_tile_supported")
    if dtype == torch.float16:
        return has("_is_amx_fp16_supported")
    return True
