"""Sampling through a LoRA adapter with its weights merged into copies of the base weights.

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
in float32. In 16-bit weights a LoRA delta smaller than the base weight's last bit would be
rounded away, so an adapter is merged only where the weights are float32 (the CPU default);
otherwise, and for what a plain delta cannot express (DoRA, trained copies of whole modules,
LoRA biases), PEFT's own forward runs (`mergeable`).
"""

from __future__ import annotations

from typing import Any

import torch


class MergedAdapters:
    """The merged weights of one selected adapter of a PEFT model, and the originals to restore."""

    def __init__(self, peft_model: Any) -> None:
        self.peft = peft_model
        self.selected: str | None = None
        self._originals: dict[Any, torch.nn.Parameter] = {}  # LoRA layer -> its base weight

    def mergeable(self, name: str) -> bool:
        """Whether adapter `name` is a plain low-rank delta on float32 linear or embedding weights."""
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
            and all(layer.get_base_layer().weight.dtype == torch.float32 for layer in layers)
        )

    def select(self, name: str | None) -> None:
        """Put adapter `name`'s merged weights in place (None: the base weights). The caller runs
        the forward inside `self.peft.disable_adapter()` so PEFT adds nothing more."""
        if name == self.selected:
            return
        for layer, original in self._originals.items():
            layer.get_base_layer().weight = original
        self._originals.clear()
        self.selected = None
        if name is None:
            return
        with torch.no_grad():  # every merged weight first: a failure leaves the base weights in place
            merged = [
                (layer, layer.get_base_layer().weight + layer.get_delta_weight(name))
                for layer in self._layers(name)
            ]
        for layer, weight in merged:
            base = layer.get_base_layer()
            self._originals[layer] = base.weight
            base.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.selected = name

    def _layers(self, name: str) -> list[Any]:
        from peft.tuners.lora import LoraLayer

        return [
            module
            for module in self.peft.modules()
            if isinstance(module, LoraLayer)
            and (name in module.lora_A or name in getattr(module, "lora_embedding_A", {}))
        ]
