"""The GRPO trainer for stored, scored groups: TRL's `GRPOTrainer` handed stored rollouts
through one seam. Imports no lake library (only `store.metrics`' names, which load without
one): `training.grpo` selects the rows and records the run.

TRL's trainer generates completions online and scores them with reward functions.
trajlake's groups were sampled earlier (replay, with token ids and logprobs) and scored
by a judge or a programmatic reward. TRL has no mode for pre-generated, already-scored
groups (its experimental `rollout_func` still scores with reward functions, recomputes
advantages per `num_generations` prompts and uses the sampler's logprobs only under vLLM),
so `StoredGroupsGRPOTrainer` overrides one TRL method, the one its own subclasses override
to change where a batch comes from, and reuses everything else (loss types, clipping, KL,
entropy, metrics, saving):

- `_generate_and_score_completions` returns the stored batch instead of sampling:
  prompt/completion ids and masks, `tool_mask` (0 on tool results and template glue),
  the precomputed group advantages, and `old_per_token_logps` = the stored sampling
  logprobs. Those are the behaviour policy of the PPO-style importance ratio
  pi_theta / pi_old, which is what makes training on stored (slightly off-policy)
  samples correct: on the first step the ratio measures how far the trainer's model
  is from the sampler, afterwards also how far it has moved.

The rest goes through public surfaces: `get_train_dataloader` (transformers' documented
override) walks the rows once per epoch, group by group (groups shuffled by `seed`;
members share their prompt, so batches pad little), each generation batch repeated
`num_iterations x steps_per_generation` times as TRL's buffering expects, instead of
repeating each prompt `num_generations` times; and the metrics TRL logs when it samples
itself (token counts, lengths, reward) are kept in `step_metrics` and averaged into the
logs by `log`, never written into TRL's private metric store.

With `vllm_importance_sampling_correction`, `store_round_start_logprobs` first takes the
trainer's own logprobs of every stored token (one forward pass, no update yet); they become
pi_old and weight the advantages (`training.mismatch`). Which rows a round trains on
(staleness bound, all-equal groups dropped, batch fitted to the rows) is
`training.grpo_rows`. Tree packing and the sampler-gap metric own the policy's forward
pass, so they live in an opt-in subclass, `training.grpo_tree_trainer.TreePackedGRPOTrainer`.

Because advantages are precomputed per stored group (`training.advantages`), groups
need not be aligned with batches. With `beta > 0` the reference logprobs are those of
the policy GRPO started from: the base model for a fresh adapter, or the SFT adapter's
initial copy TRL keeps as the `ref` adapter when continuing from it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader
from transformers.trainer_utils import seed_worker
from trl import GRPOTrainer
from trl.trainer.utils import nanstd, use_adapter

from store.metrics import IMPORTANCE_RATIO_MAX, IMPORTANCE_RATIO_MEAN, IMPORTANCE_RATIO_MIN
from training.grpo_batch import GroupedRepeatSampler, pad_rows, padded, rows_as_tensors
from training.mismatch import importance_weights, weighted_advantages

if TYPE_CHECKING:
    from training.grpo_config import TrajlakeGRPOConfig

# The round-start pass keeps no activations for a backward pass, so it batches this many
# times wider than a training step for the same memory.
ROUND_START_BATCH_FACTOR = 4


def stored_reward(completions: list[Any], reward: list[float], **kwargs: Any) -> list[float]:
    """The reward stored in the lake for each trajectory (the row's `reward` column).

    `GRPOTrainer` requires a reward source; on stored groups the rewards are data, and this
    function names them in TRL's logs. It is never asked to score new completions.
    """
    return list(reward)


class StoredGroupsGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that trains on stored, scored groups instead of sampling new ones."""

    # What `train_grpo` always passes (TRL types them for every trainer: TrainingArguments, optionals)
    args: TrajlakeGRPOConfig
    model: Any
    train_dataset: Any
    processing_class: Any
    pad_to_multiple_of: int | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # This trainer's own per-step values by mode, averaged into the logs by `log`.
        self.step_metrics: dict[str, defaultdict[str, list[float]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }

    def get_train_dataloader(self) -> Any:
        """Generation batches of whole stored groups, as TRL's `_prepare_inputs` consumes them.

        One pass over the rows per epoch, group by group (`GroupedRepeatSampler`); each
        generation batch (`steps_per_generation` training batches) is yielded
        `num_iterations * steps_per_generation` times, because TRL consumes one dataloader
        batch per micro-step and reuses its buffered split of the first. Rows stay rows
        (`rows_as_tensors`): `stored_batch` pads them.
        """
        args = self.args
        sampler = GroupedRepeatSampler(
            self.train_dataset["group_id"],
            data_source=self.train_dataset,
            mini_repeat_count=1,
            batch_size=args.generation_batch_size,
            # never None once GRPOConfig.__post_init__ has run
            repeat_count=self.num_iterations * args.steps_per_generation,  # type: ignore[operator]
            shuffle=self.shuffle_dataset,
            seed=args.seed,
        )
        loader = DataLoader(
            self.train_dataset,
            batch_size=args.train_batch_size * args.steps_per_generation,  # type: ignore[operator]
            sampler=sampler,
            collate_fn=rows_as_tensors,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
            drop_last=args.dataloader_drop_last,
            worker_init_fn=partial(
                seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index
            ),
        )
        return self.accelerator.prepare(loader)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's logs plus this trainer's `step_metrics` since the last log, averaged as TRL
        averages its own (NaN values left out; None where none is left)."""
        mode = "train" if self.model.training else "eval"
        prefix = "" if mode == "train" else "eval_"
        own = self.step_metrics[mode]
        averaged: dict[str, Any] = {}  # None where every value was NaN, as TRL logs it
        for key, values in own.items():
            valid = [v for v in values if not math.isnan(v)]
            averaged[prefix + key] = sum(valid) / len(valid) if valid else None
        own.clear()
        super().log({**logs, **averaged}, start_time)

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
        metrics = self.step_metrics[mode]
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
        metrics = self.step_metrics[mode]
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
