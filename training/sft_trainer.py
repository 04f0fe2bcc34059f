"""The SFT trainer: TRL's `SFTTrainer`, each batch forwarded once as a prefix tree.

Lake conversations of one agent open alike: the same system prompt and tool definitions
(about 250 of SmolLM2's ~300 tokens in the demo's calculator conversations), often the same
first user turn. Stock TRL forwards every conversation whole. With `tree_packing` (on by
default) a training batch's rows become one prefix tree over their token ids
(`training.tree_pack.pack_labeled_rows`): what they share before their first trained token
is forwarded once, every trained token stays its row's own node, and each token attends to
exactly its own row's earlier tokens at its own position. The loss is TRL's (the sum of the
trained tokens' negative log-likelihoods over `num_items_in_batch`) computed on the nodes,
so loss and LoRA gradients equal the unpacked ones (`tests/training/test_sft_tree_pack.py`).

Rows the packer cannot take (left padding, TRL's padding-free `packing`), evaluation, and
models whose attention takes no mask go through stock TRL's `compute_loss` unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from trl import SFTTrainer

from store.metrics import TREE_PACKING_SAVED_SHARE
from training.tree_pack import IGNORE, TREE_ATTENTION, TreePack, attention_mask_for, pack_labeled_rows

logger = logging.getLogger(__name__)


class TreePackedSFTTrainer(SFTTrainer):  # type: ignore[misc]  # TRL ships no type stubs
    """`SFTTrainer` whose training batches are forwarded as prefix trees (`args.tree_packing`)."""

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        pack = self.packed(model, inputs) if model.training and not return_outputs else None
        if pack is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        base = self.accelerator.unwrap_model(model)
        attention = attention_mask_for(pack, base.config._attn_implementation)
        if pack.input_ids.device.type == "cpu":
            scored = labelled_positions(model, pack, attention)
        else:
            # TRL's fused LM head: in tiles, never the whole logits; where Triton runs (CUDA,
            # XPU) it projects only the trained positions too.
            outputs = model(
                input_ids=pack.input_ids,
                attention_mask=attention,
                position_ids=pack.position_ids,
                shift_labels=pack.shift_labels,
                use_cache=False,
                fused_lm_head=True,
            )
            mask = outputs.label_mask.bool()
            scored = Scored(outputs.log_probs[mask], outputs.entropy[mask], outputs.is_top1[mask])
        num_tokens = scored.log_probs.numel() if num_items_in_batch is None else num_items_in_batch
        loss = -scored.log_probs.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        self.log_packed_metrics(scored, inputs, pack)
        return loss

    def packed(self, model: Any, inputs: dict[str, Any]) -> TreePack | None:
        """The batch as a prefix tree; None where it goes through stock TRL instead."""
        if not getattr(self.args, "tree_packing", False) or set(inputs) - {
            "input_ids",
            "attention_mask",
            "labels",
        }:
            return None
        if "attention_mask" not in inputs or "labels" not in inputs:
            return None  # padding-free rows (`packing`): already one flat sequence
        implementation = self.accelerator.unwrap_model(model).config._attn_implementation
        if implementation not in TREE_ATTENTION:
            if not getattr(self, "_warned_tree_attention", False):
                logger.warning(
                    "tree_packing: attention implementation `%s` takes no tree mask; rows are forwarded unpacked",
                    implementation,
                )
                self._warned_tree_attention = True
            return None
        pack = pack_labeled_rows(inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
        return pack if pack is not None and pack.nodes > 0 else None

    def log_packed_metrics(self, scored: Scored, inputs: dict[str, Any], pack: TreePack) -> None:
        """TRL's SFT metrics (entropy, token accuracy, tokens seen) and the share packing saved."""
        metrics = self._metrics["train"]
        gather = self.accelerator.gather_for_metrics
        valid = gather(torch.as_tensor(scored.log_probs.numel(), device=scored.log_probs.device)).sum()
        entropy = gather(scored.entropy.detach().sum()).sum()
        correct = gather(scored.is_top1.sum()).sum()
        metrics["entropy"].append((entropy / valid).item() if valid > 0 else 0.0)
        metrics["mean_token_accuracy"].append((correct / valid).item() if valid > 0 else 0.0)
        self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item() // self._tp_size
        metrics["num_tokens"] = [self._total_train_tokens]
        metrics[TREE_PACKING_SAVED_SHARE].append(pack.saved_share)


@dataclass(frozen=True)
class Scored:
    """Each trained token of a packed batch: its log-probability (what the loss sums), and for
    TRL's logged metrics the entropy of its distribution and whether it was the top token."""

    log_probs: torch.Tensor  # (trained tokens,)
    entropy: torch.Tensor
    is_top1: torch.Tensor


def labelled_positions(model: Any, pack: TreePack, attention: Any) -> Scored:
    """The trained tokens scored by the model's own forward, through its LM head at only the
    columns that hold one (`logits_to_keep`, transformers' indices into the sequence).

    On a CPU TRL's fused head projects every position (its kernel compacts to the trained ones
    only under Triton), and SmolLM2's head is 28M of its 135M parameters: the system prompt,
    tool definitions and user turns cost a vocabulary-wide matmul each, forward and twice
    backward, for logits no loss reads. Only the trained positions' logits are made here
    (stock TRL without the fused head makes every position's), with the model's own final
    logit transforms; loss and gradients equal stock TRL's (`tests/training/test_sft_tree_pack.py`).
    """
    mask = pack.shift_labels != IGNORE  # (sequences, width)
    columns = mask.any(dim=0).nonzero()[:, 0]  # a column any sequence trains
    outputs = model(
        input_ids=pack.input_ids,
        attention_mask=attention,
        position_ids=pack.position_ids,
        use_cache=False,
        logits_to_keep=columns,
    )
    kept = mask[:, columns]
    logits = outputs.logits[kept].float()  # (trained tokens, vocabulary)
    labels = pack.shift_labels[:, columns][kept]
    log_softmax = torch.log_softmax(logits, dim=-1)
    log_probs = log_softmax.gather(-1, labels[:, None])[:, 0]
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
        is_top1 = logits.argmax(dim=-1) == labels
    return Scored(log_probs, entropy, is_top1)
