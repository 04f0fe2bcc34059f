"""The GRPO trainer for stored, scored groups: TRL's `GRPOTrainer` with two things changed
and one added. Imports no lake library (only `store.metrics`' names, which load without one):
`training.grpo` selects the rows and records the run.

TRL's trainer generates completions online and scores them with reward functions.
trajlake's groups were sampled earlier (replay, with token ids and logprobs) and scored
by a judge or a programmatic reward, so `StoredGroupsGRPOTrainer` changes exactly two
things and reuses everything else (loss types, clipping, KL, entropy, metrics, saving):

- `_generate_and_score_completions` returns the stored batch instead of sampling:
  prompt/completion ids and masks, `tool_mask` (0 on tool results and template glue),
  the precomputed group advantages, and `old_per_token_logps` = the stored sampling
  logprobs. Those are the behaviour policy of the PPO-style importance ratio
  pi_theta / pi_old, which is what makes training on stored (slightly off-policy)
  samples correct: on the first step the ratio measures how far the trainer's model
  is from the sampler, afterwards also how far it has moved.
- `_get_train_sampler` (transformers' hook) walks the rows once per epoch, group by group (groups shuffled by
  `seed`; members share their prompt, so batches pad little), each generation batch
  repeated `num_iterations x steps_per_generation` times as TRL's buffering expects,
  instead of repeating each prompt `num_generations` times.

Every step logs the gap between the trainer's logprobs of the stored tokens and the
sampler's (`sampling/sampling_logp_difference/{mean,max}`, a `runs` column), read from the
forward pass that computes the loss, so it costs nothing: at a round's first step it is
the sampler/trainer mismatch alone, later steps add what the optimiser changed since the
groups were sampled (`compute_loss`, TRL's public one, hands the batch to the logprob
pass it calls for the loss). With `vllm_importance_sampling_correction`,
`store_round_start_logprobs` first takes the trainer's own logprobs of every stored token
(one forward pass, no update yet); they become pi_old and weight the advantages
(`training.mismatch`). Which rows a round trains on (staleness bound, all-equal groups
dropped, batch fitted to the rows) is `training.grpo_rows`.

Because advantages are precomputed per stored group (`training.advantages`), groups
need not be aligned with batches. With `beta > 0` the reference logprobs are those of
the policy GRPO started from: the base model for a fresh adapter, or the SFT adapter's
initial copy TRL keeps as the `ref` adapter when continuing from it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, nanstd, use_adapter

from store.metrics import (
    IMPORTANCE_RATIO_MAX,
    IMPORTANCE_RATIO_MEAN,
    IMPORTANCE_RATIO_MIN,
    SAMPLER_GAP_MAX,
    SAMPLER_GAP_MEAN,
    TREE_PACKING_SAVED_SHARE,
)
from training.grpo_batch import GroupedRepeatSampler, pad_rows, padded, rows_as_tensors
from training.mismatch import gap_from_totals, importance_weights, sampler_gap_totals, weighted_advantages
from training.tree_pack import TREE_ATTENTION, TreePack, attention_mask_for, pack_rows, unpack

if TYPE_CHECKING:
    from training.grpo_config import TrajlakeGRPOConfig

# The round-start pass keeps no activations for a backward pass, so it batches this many
# times wider than a training step for the same memory.
ROUND_START_BATCH_FACTOR = 4
# On a GPU a packed sequence's width is rounded up to this: each new shape costs the fused LM
# head's Triton autotuning (and FlexAttention a compile), and node counts differ every batch.
PACK_WIDTH_MULTIPLE = 128

logger = logging.getLogger(__name__)


def stored_reward(completions: list[Any], reward: list[float], **kwargs: Any) -> list[float]:
    """The reward stored in the lake for each trajectory (the row's `reward` column).

    `GRPOTrainer` requires a reward source; on stored groups the rewards are data, and this
    function names them in TRL's logs. It is never asked to score new completions.
    """
    return list(reward)


class StoredGroupsGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that trains on stored, scored groups instead of sampling new ones."""

    _gap_batch: dict[str, Any] | None = None  # the batch whose loss is being computed (gap metric)
    # What `train_grpo` always passes (TRL types them for every trainer: TrainingArguments, optionals)
    args: TrajlakeGRPOConfig
    model: Any
    train_dataset: Any
    processing_class: Any
    pad_to_multiple_of: int | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data_collator = rows_as_tensors  # type: ignore[assignment]  # rows stay rows: `stored_batch` pads them

    def _get_train_sampler(self, dataset: Any = None) -> RepeatSampler:
        # One pass over the rows per epoch, group by group; each generation batch is yielded
        # `num_iterations * steps_per_generation` times because `_prepare_inputs` consumes
        # one dataloader batch per micro-step and reuses its buffered split of the first.
        dataset = dataset if dataset is not None else self.train_dataset
        return GroupedRepeatSampler(
            dataset["group_id"],
            data_source=dataset,
            mini_repeat_count=1,
            batch_size=self.args.generation_batch_size,
            # never None once GRPOConfig.__post_init__ has run
            repeat_count=self.num_iterations * self.args.steps_per_generation,  # type: ignore[operator]
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def stored_batch(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad stored rows into the tensors `GRPOTrainer._compute_loss` reads."""
        device = self.accelerator.device
        pad_id = self.processing_class.pad_token_id if hasattr(self.processing_class, "pad_token_id") else 0
        pad_id = pad_id if pad_id is not None else 0
        batch = pad_rows(rows, pad_id, self.pad_to_multiple_of, self.mask_truncated_completions)
        return {k: v.to(device) for k, v in batch.items()}

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor | Any]:
        mode = "train" if self.model.training else "eval"
        batch = self.stored_batch(inputs)
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()

        if self.beta != 0.0:
            batch["ref_per_token_logps"] = self.reference_logps(batch, mode)

        # Token accounting and the metrics TRL logs when it samples itself.
        prompt_tokens = batch["prompt_mask"].sum()
        completion_tokens = batch["completion_mask"].sum()
        self.state.num_input_tokens_seen += (
            self.accelerator.gather(prompt_tokens + completion_tokens).sum().item()
        )
        metrics = self._metrics[mode]
        metrics["num_tokens"] = [self.state.num_input_tokens_seen]
        lengths = self.accelerator.gather(batch["completion_mask"].sum(1).float())
        metrics["completions/mean_length"].append(lengths.mean().item())
        metrics["completions/max_length"].append(lengths.max().item())
        sampled = self.accelerator.gather(loss_mask.sum(1).float())
        metrics["completions/mean_sampled_tokens"].append(sampled.mean().item())
        truncated = torch.tensor([float(bool(r["truncated"])) for r in inputs], device=lengths.device)
        metrics["completions/clipped_ratio"].append(self.accelerator.gather(truncated).mean().item())
        rewards = self.accelerator.gather(
            torch.tensor([float(r["reward"]) for r in inputs], device=lengths.device)
        )
        advantages = self.accelerator.gather(batch["advantages"])
        metrics["reward"].append(rewards.mean().item())
        metrics["reward_std"].append(nanstd(rewards).item() if rewards.numel() > 1 else 0.0)
        metrics[f"rewards/{self.reward_func_names[0]}/mean"].append(rewards.mean().item())
        metrics["frac_reward_zero_std"].append((advantages == 0).float().mean().item())
        if self.args.vllm_importance_sampling_correction:
            # without the round-start column (a resumed run, a direct call): the model as it is now
            trainer_logps = (
                None if all("trainer_logprobs" in r for r in inputs) else self.current_logps(batch, mode)
            )
            self.correct_sampler_mismatch(batch, inputs, loss_mask, mode, trainer_logps)
        return batch

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> torch.Tensor:
        # The loss's own forward pass gives the trainer's logprobs of the stored tokens: the
        # sampler/trainer gap is read there (`_get_per_token_logps_and_entropies`), for free;
        # the batch reaches it through `_gap_batch`, set for this call alone.
        self._gap_batch = inputs if self.args.measure_sampler_gap and model.training else None
        try:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._gap_batch = None

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
        batch, self._gap_batch = self._gap_batch, None
        if batch is not None:  # the first call of a loss computation: the policy's logprobs
            sampled = batch.get("sampling_per_token_logps", batch["old_per_token_logps"])
            totals = sampler_gap_totals(
                out[0].detach(), sampled, batch["completion_mask"] * batch["tool_mask"]
            )
            mean_gap, max_gap = gap_from_totals(self.accelerator.gather(totals[None]))  # every rank's tokens
            self._metrics["train"][SAMPLER_GAP_MEAN].append(mean_gap)
            self._metrics["train"][SAMPLER_GAP_MAX].append(max_gap)
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
            self._metrics["train"][TREE_PACKING_SAVED_SHARE].append(saved)
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

    @torch.no_grad()
    def correct_sampler_mismatch(
        self,
        batch: dict[str, torch.Tensor],
        rows: list[dict[str, Any]],
        mask: torch.Tensor,
        mode: str,
        trainer_logps: torch.Tensor | None = None,
    ) -> None:
        """TIS: the trainer's round-start logprobs become pi_old, and the advantages are weighted by
        pi_old / pi_sampler (`training.mismatch`); the sampler's stay as `sampling_per_token_logps`."""
        args = self.args
        if trainer_logps is None:
            trainer_logps = padded(
                [r["trainer_logprobs"] for r in rows], torch.float32, 0.0, "right", self.pad_to_multiple_of
            ).to(mask.device)
        sampled = batch["old_per_token_logps"]
        weights = importance_weights(
            trainer_logps,
            sampled,
            mask,
            mode=args.vllm_importance_sampling_mode,
            clip_min=args.vllm_importance_sampling_clip_min,
            clip_max=args.vllm_importance_sampling_clip_max,
        )
        batch["advantages"] = weighted_advantages(batch["advantages"], weights)
        batch["sampling_per_token_logps"] = sampled
        batch["old_per_token_logps"] = trainer_logps
        kept = weights.expand_as(trainer_logps)[mask.bool()] if mask.any() else weights.flatten()
        metrics = self._metrics[mode]
        metrics[IMPORTANCE_RATIO_MIN].append(kept.min().item())
        metrics[IMPORTANCE_RATIO_MEAN].append(kept.mean().item())
        metrics[IMPORTANCE_RATIO_MAX].append(kept.max().item())

    @torch.no_grad()
    def current_logps(
        self, batch: dict[str, torch.Tensor], mode: str, model: Any = None, batch_size: int | None = None
    ) -> torch.Tensor:
        """Per-token logprobs of the stored completion tokens under `model` (the policy as it is now)."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        size = batch_size or (
            self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        )
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model if model is not None else self.model,
            input_ids,
            attention_mask,
            batch["completion_ids"].size(1),
            batch_size=size,
        )
        return logps

    def store_round_start_logprobs(self) -> None:
        """Add the trainer's logprobs of every row, before the first update, as column `trainer_logprobs`.

        A no-grad pass, so it batches wider than training; rows that share prefixes are
        batched together (tree-packed: each shared prefix forwarded once) or, unpacked, rows
        of similar lengths (little padding). Masked
        positions (tool results, glue) are kept as computed; the gap and the weights only
        ever read them through the loss mask.
        """
        dataset = self.train_dataset
        size = self.args.per_device_train_batch_size * ROUND_START_BATCH_FACTOR
        pairs = list(zip(dataset["prompt_ids"], dataset["completion_ids"], strict=True))
        # tree-packed, rows that share prefixes go together (sorted by tokens); else similar lengths
        keys = pairs if self.args.tree_packing else [(len(p), len(c)) for p, c in pairs]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        was_training = self.model.training
        self.model.eval()  # no dropout: the logprobs a sampler would compute
        values: list[list[float]] = [[] for _ in order]
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            rows = [dataset[i] for i in chunk]
            logps = self.current_logps(self.stored_batch(rows), "train", batch_size=size)
            for i, lp, r in zip(chunk, logps, rows, strict=True):
                values[i] = lp[: len(r["completion_ids"])].tolist()
        self.model.train(was_training)
        self.train_dataset = dataset.add_column("trainer_logprobs", values)

    @torch.no_grad()
    def reference_logps(self, batch: dict[str, torch.Tensor], mode: str) -> torch.Tensor:
        """Per-token logprobs of the reference policy (frozen copy or adapters disabled), as TRL computes them."""
        if self.ref_model is not None:
            return self.current_logps(batch, mode, self.ref_model)
        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self.current_logps(batch, mode)
