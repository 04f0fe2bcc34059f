"""Sampling through a LoRA adapter merged into copies of the base weights (stacked under them in 16 bits).

PEFT's LoRA layer computes `base(x) + B(A(x)) * scale` on every forward: three matmuls, a
scale and an add where the base model has one matmul. At a SmolLM2 decode step of 384 rows on
a 2-core CPU that took 1,009 ms against the base model's 740 (+36%), and replay and evaluation
sample through an adapter almost always (each GRPO round's policy, each evaluated stage).

`MergedAdapters` adds the selected adapter's delta (`get_delta_weight`, PEFT's own) to a copy
of each base weight it targets, once per selection, and the forward runs with PEFT's adapter
layers disabled (`disable_adapter`) over those weights: one matmul a layer again. The base
weights are never written: selecting no adapter or another one puts the originals back, so
what a row samples does not depend on which adapters were selected before it (PEFT's
in-place `merge`/`unmerge` would leave rounding drift behind each switch). The cost is memory:
one copy of the weights the adapter targets while it is selected (SmolLM2 with every
projection targeted: 106M parameters, 425 MB in float32), and a merge (~0.25 s) at each switch
of adapter, which the sampler makes once per batch at most.

Merged weights equal the unmerged forward up to the rounding of a different summation order
in float32. In 16-bit weights (bfloat16 sampling) a merge would round the delta into the
weight's last bit: on the SmolLM2 demo's night-1 adapter that moved a token's logprob by up to 0.58 nats
(mean 0.002) where PEFT's forward in bfloat16 moves it by at most 0.07 (mean 0.0004), both
against float32. So 16-bit linear layers *stack* instead: the adapter's `A` is appended to the
base weight's rows, one matmul computes `[W x | A x]`, and a forward hook adds
`(A x) @ (scale B)^T` to the first part: the delta never meets the weight's rounding, and the
layer is one large matmul and one of rank `r` (PEFT's forward: three, a scale and an add, with
a cast of `x` to the adapter's float32 and back). What a plain delta cannot express (DoRA,
trained copies of whole modules, LoRA biases), and 16-bit embeddings, keep PEFT's own forward
(`mergeable`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch


class MergedAdapters:
    """The merged (or stacked) weights of one selected adapter of a PEFT model, and the originals to restore."""

    def __init__(self, peft_model: Any) -> None:
        self.peft = peft_model
        self.selected: str | None = None
        self._originals: dict[Any, tuple[Any, Any]] = {}  # LoRA layer -> its base weight and bias
        self._hooks: list[Any] = []  # the stacked layers' forward hooks

    def mergeable(self, name: str) -> bool:
        """Whether adapter `name` is a plain low-rank delta on linear weights (and embeddings, in float32)."""
        from peft.tuners.lora import Embedding, Linear

        config = self.peft.peft_config[name]
        layers = self._layers(name)
        return (
            getattr(config, "peft_type", None) == "LORA"
            and not getattr(config, "use_dora", False)
            and not getattr(config, "lora_bias", False)
            and not getattr(config, "modules_to_save", None)
            and not getattr(config, "trainable_token_indices", None)
            # their delta has their weight's shape (a convolution's need not)
            and all(isinstance(layer, Linear | Embedding) for layer in layers)
            and all(
                layer.get_base_layer().weight.dtype == torch.float32
                or (isinstance(layer, Linear) and not layer.fan_in_fan_out)  # stacked: [W; A] rows
                for layer in layers
            )
        )

    def select(self, name: str | None) -> None:
        """Put adapter `name`'s merged (or, in 16 bits, stacked) weights in place (None: the base
        weights). The caller runs the forward inside `self.peft.disable_adapter()` so PEFT adds
        nothing more."""
        if name == self.selected:
            return
        for layer, (weight, bias) in self._originals.items():
            base = layer.get_base_layer()
            base.weight = weight
            if hasattr(base, "bias"):
                base.bias = bias
        for hook in self._hooks:
            hook.remove()
        self._originals.clear()
        self._hooks.clear()
        self.selected = None
        if name is None:
            return
        with torch.no_grad():  # every new weight first: a failure leaves the base weights in place
            replaced = [(layer, _replacement(layer, name)) for layer in self._layers(name)]
        for layer, (weight, rows_out, up) in replaced:
            base = layer.get_base_layer()
            self._originals[layer] = (base.weight, getattr(base, "bias", None))
            base.weight = torch.nn.Parameter(weight, requires_grad=False)
            if up is not None:
                if base.bias is not None:  # the stacked rows of `A x` get none
                    zeros = base.bias.new_zeros(weight.shape[0] - rows_out)
                    base.bias = torch.nn.Parameter(torch.cat([base.bias, zeros]), requires_grad=False)
                self._hooks.append(base.register_forward_hook(partial(_add_low_rank, rows_out, up)))
        self.selected = name

    def _layers(self, name: str) -> list[Any]:
        from peft.tuners.lora import LoraLayer

        return [
            module
            for module in self.peft.modules()
            if isinstance(module, LoraLayer)
            and (name in module.lora_A or name in getattr(module, "lora_embedding_A", {}))
        ]


def _replacement(layer: Any, name: str) -> tuple[torch.Tensor, int, torch.Tensor | None]:
    """The weight to put in `layer`'s base layer while adapter `name` is selected, the base
    layer's output width, and for a stacked layer the up-projection its hook applies.

    Float32: the merged weight `W + scale B A`. 16 bits: `[W; A]` (the rows of `A` below `W`'s,
    in `W`'s precision), with `scale B` as the up-projection.
    """
    weight = layer.get_base_layer().weight
    if weight.dtype == torch.float32:
        return weight + layer.get_delta_weight(name), weight.shape[0], None
    down = layer.lora_A[name].weight
    up = layer.lora_B[name].weight * layer.scaling[name]
    return torch.cat([weight, down.to(weight.dtype)]), weight.shape[0], up.to(weight.dtype)


def _add_low_rank(
    rows_out: int, up: torch.Tensor, module: Any, args: Any, output: torch.Tensor
) -> torch.Tensor:
    """A stacked layer's output `[W x | A x]` -> `W x + (A x) up^T`, rounded once."""
    full, low = output[..., :rows_out], output[..., rows_out:]
    flat = torch.addmm(full.reshape(-1, rows_out), low.reshape(-1, low.shape[-1]), up.T)
    return flat.view(*output.shape[:-1], rows_out)
