"""The opt-in layer over `StoredGroupsGRPOTrainer` that owns the policy's forward pass:
tree packing and the sampler-gap metric, both read where TRL computes per-token logprobs.

`TreePackedGRPOTrainer` overrides a second TRL method, `_get_per_token_logps_and_entropies`
(the one every GRPO forward goes through: the loss's policy pass, and here the round-start
and reference passes too), and only for what needs it; `training.grpo` uses it when
`tree_packing` or `measure_sampler_gap` is on (both are by default) and the one-seam base
trainer otherwise.

- Tree packing (`args.tree_packing`): each chunk of rows is forwarded once as a prefix tree
  (`training.tree_pack`), so a group's shared prompt and shared first turns are computed once;
  per-row logprobs and entropies equal the unpacked forward's. Rows or models it cannot take
  go through TRL's forward unchanged (a model whose attention ignores the tree: one warning).
- The sampler gap (`args.measure_sampler_gap`): every step logs the gap between the trainer's
  logprobs of the stored tokens and the sampler's (`sampling/sampling_logp_difference/{mean,max}`,
  a `runs` column), read from the forward pass that computes the loss, so it costs nothing: at a
  round's first step it is the sampler/trainer mismatch alone, later steps add what the optimiser
  changed since the groups were sampled. `compute_loss` (TRL's public one) listens to the
  logprobs its forward returns and measures them against the batch it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from store.metrics import SAMPLER_GAP_MAX, SAMPLER_GAP_MEAN, TREE_PACKING_SAVED_SHARE
from training.grpo_config import TrajlakeGRPOConfig
from training.grpo_trainer import StoredGroupsGRPOTrainer
from training.mismatch import gap_from_totals, sampler_gap_totals
from training.tree_pack import TREE_ATTENTION, TreePack, attention_mask_for, pack_rows, unpack

# On a GPU a packed sequence's width is rounded up to this: each new shape costs the fused LM
# head's Triton autotuning (and FlexAttention a compile), and node counts differ every batch.
PACK_WIDTH_MULTIPLE = 128

logger = logging.getLogger(__name__)


class TreePackedGRPOTrainer(StoredGroupsGRPOTrainer):
    """`StoredGroupsGRPOTrainer` whose forwards are tree-packed (`args.tree_packing`) and whose
    loss pass measures the sampler gap (`args.measure_sampler_gap`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Lists that collect the per-token logprobs each forward returns, while one is open
        # (`logprobs_seen`); empty outside `compute_loss`, so other forwards record nothing.
        self.logprob_listeners: list[list[torch.Tensor]] = []
        super().__init__(*args, **kwargs)

    @contextmanager
    def logprobs_seen(self) -> Iterator[list[torch.Tensor]]:
        """Inside, every per-token logprob tensor a forward returns is appended (detached) to the list."""
        seen: list[torch.Tensor] = []
        self.logprob_listeners.append(seen)
        try:
            yield seen
        finally:
            self.logprob_listeners.remove(seen)

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> torch.Tensor:
        if not (self.args.measure_sampler_gap and model.training):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with self.logprobs_seen() as seen:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if seen:  # the loss's first forward is the policy's
            self.record_sampler_gap(inputs, seen[0])
        return loss

    def record_sampler_gap(self, inputs: dict[str, Any], policy_logps: torch.Tensor) -> None:
        """The gap between the policy's logprobs of the batch's scored tokens and the sampler's,
        over every rank's tokens, into this step's metrics."""
        sampled = inputs.get("sampling_per_token_logps", inputs["old_per_token_logps"])
        totals = sampler_gap_totals(policy_logps, sampled, inputs["completion_mask"] * inputs["tool_mask"])
        mean_gap, max_gap = gap_from_totals(self.accelerator.gather(totals[None]))
        self.step_metrics["train"][SAMPLER_GAP_MEAN].append(mean_gap)
        self.step_metrics["train"][SAMPLER_GAP_MAX].append(max_gap)

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **inputs: Any,
    ) -> Any:
        out = None
        if self.args.tree_packing and not compute_aux_loss and all(v is None for v in inputs.values()):
            out = self.packed_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy
            )
        if out is None:
            out = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **inputs,
            )
        for listener in self.logprob_listeners:
            listener.append(out[0].detach())
        return out

    def packed_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None,
        compute_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, None] | None:
        """TRL's per-token logprobs (and entropies) of the rows, each chunk of `batch_size` rows
        forwarded as one prefix tree (`training.tree_pack`); None where the rows or the model
        cannot be packed, and the caller forwards them unpacked."""
        base = self.accelerator.unwrap_model(model)
        if not self.tree_attention_ok(base):
            return None
        implementation = base.config._attn_implementation
        size = batch_size or input_ids.size(0)
        packs = [
            pack_rows(
                input_ids[start : start + size],
                attention_mask[start : start + size],
                logits_to_keep,
                multiple=PACK_WIDTH_MULTIPLE if input_ids.is_cuda else 1,
            )
            for start in range(0, input_ids.size(0), size)
        ]
        packed = [pack for pack in packs if pack is not None and pack.nodes > 0]
        if len(packed) < len(packs):
            return None  # rows it cannot pack, or nothing scored at all (every row masked): stock TRL's way
        logps, entropies = [], []
        for pack in packed:
            outputs = self.packed_forward(model, pack, implementation)
            logps.append(unpack(outputs.log_probs, pack))
            if compute_entropy:
                entropies.append(unpack(outputs.entropy, pack))
        if model.training:
            saved = 1.0 - sum(p.nodes for p in packed) / max(1, sum(p.row_tokens for p in packed))
            self.step_metrics["train"][TREE_PACKING_SAVED_SHARE].append(saved)
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def packed_forward(self, model: Any, pack: TreePack, implementation: str) -> Any:
        """TRL's fused-head forward of one packed batch: per-node log-probs (and entropies)."""
        with self.accelerator.autocast():
            return model(
                input_ids=pack.input_ids,
                attention_mask=attention_mask_for(pack, implementation),
                position_ids=pack.position_ids,
                shift_labels=pack.shift_labels,
                fused_lm_head=True,
            )

    def tree_attention_ok(self, model: Any) -> bool:
        """Whether `model`'s attention takes the tree mask, decided once per model: its
        implementation takes a ready mask, and a small packed forward equals the unpacked one.
        Otherwise one warning, and its rows are forwarded unpacked."""
        verdicts = self.__dict__.setdefault("_tree_attention", {})
        if id(model) not in verdicts:
            implementation = model.config._attn_implementation
            reason = (
                None
                if implementation in TREE_ATTENTION
                else f"its attention implementation `{implementation}` takes no tree mask"
            )
            if reason is None:
                reason = self.tree_probe(model)
            if reason is not None:
                logger.warning("tree_packing: %s; this model's rows are forwarded unpacked", reason)
            verdicts[id(model)] = reason is None
        return bool(verdicts[id(model)])

    @torch.no_grad()
    def tree_probe(self, model: Any) -> str | None:
        """Two rows sharing a prompt, packed and unpacked: None when their logprobs agree."""
        vocab = model.config.get_text_config().vocab_size
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(3, vocab, (2, 24), generator=generator)
        tokens[1, :16] = tokens[0, :16]
        tokens = tokens.to(self.accelerator.device)
        mask = torch.ones_like(tokens)
        was_training = model.training
        model.eval()
        try:
            pack = pack_rows(tokens, mask, 8)
            assert pack is not None
            packed = unpack(
                self.packed_forward(model, pack, model.config._attn_implementation).log_probs, pack
            )
            rows = super()._get_per_token_logps_and_entropies(model, tokens, mask, 8)[0]  # stock TRL's
        except Exception as error:  # any model that refuses the packed inputs
            return f"the packed forward failed ({type(error).__name__}: {error})"
        finally:
            model.train(was_training)
        gap = (packed - rows).abs().max().item()
        tolerance = 1e-3 if next(model.parameters()).dtype == torch.float32 else 0.1
        return None if gap <= tolerance else f"packed and unpacked logprobs differ by {gap:.2g}"


def grpo_trainer_class(config: TrajlakeGRPOConfig) -> type[StoredGroupsGRPOTrainer]:
    """The trainer `config` asks for: the one-seam stored-groups trainer, or its layer that
    owns the policy's forward when `tree_packing` or `measure_sampler_gap` is on."""
    if config.tree_packing or config.measure_sampler_gap:
        return TreePackedGRPOTrainer
    return StoredGroupsGRPOTrainer
