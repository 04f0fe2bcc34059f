"""Which precisions this machine multiplies in hardware, for a sampler asked to load a model in one."""

from __future__ import annotations

from typing import Any


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
