"""What the training device can do, for choosing defaults that are fast where they run.

Measured on one CPU core (tiny model + LoRA, 181 conversations of ~230 tokens, batch 8):
bf16 autocast made a step ~3x slower than fp32, and TRL's padding-free `bfd` packing
(each batch one flattened sequence, which attention without FlashAttention treats as one
long sequence) cost 3.7 s/step (22 s/epoch) against 0.15 s/step (3.4 s/epoch) for
unpacked, padded batches. On a GPU bf16 is native, and padding-free packing still lost: with
SDPA, `bench/gpu.py` measured it at 0.57x of padded batches on an H200 (0.5B shape, agent
conversations up to 4,096 tokens); it needs a FlashAttention varlen kernel to pay. So SFT
trains on padded batches by default everywhere (`packing = true` where FlashAttention runs).

Activation checkpointing trades compute for memory: the backward pass forwards each layer
again. A LoRA step's own work is ~4 x parameters x tokens (the forward, and the backward's
input gradients; the frozen weights take none), so recomputing adds half of it again. On
SmolLM2-135M (2-core Xeon, fp32, batch 8, `bench/train.py --activation-checkpointing on|off`)
it made an SFT step 1.23x and a GRPO step 1.27x slower. A CPU trains in host memory (tens of
GB against activations of a few GB for the models a CPU trains at all); a GPU's memory is what
limits batch and model size there. So it is off on a CPU and on (TRL's choice) elsewhere.
`bench/train.py` and `bench/gpu.py` show the numbers on the machine at hand.
"""

from __future__ import annotations

from typing import Any


def bf16_supported() -> bool:
    """Whether bf16 mixed precision can run here (a CUDA device that supports it)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def cpu_only() -> bool:
    """No accelerator (CUDA, XPU, MPS) is present."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    return not (accelerator.is_available() if accelerator is not None else torch.cuda.is_available())


def recompute_activations(use_cpu: bool = False) -> bool:
    """The default of `activation_checkpointing`: off where training runs on a CPU (`use_cpu`, or no
    accelerator), where recomputation costs a quarter of a step and memory is plentiful; on elsewhere."""
    return not (use_cpu or cpu_only())


def claim_cpu(config: Any) -> None:
    """Set `use_cpu` on a machine without an accelerator (call before `TrainingArguments.__post_init__`).

    Launched on several processes (`torchrun`, `accelerate launch`) without it, accelerate
    leaves each process training alone on the whole data set; with it, they form one
    data-parallel run over gloo (`DistributedType.MULTI_CPU`). A single process trains the same.
    """
    if not config.use_cpu and cpu_only():
        config.use_cpu = True
