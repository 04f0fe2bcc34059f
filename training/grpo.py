"""GRPO stage: refine a LoRA adapter on stored, scored groups with TRL's `GRPOTrainer`.

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
- `_get_train_sampler` walks the rows once per epoch, group by group (groups shuffled by
  `seed`; members share their prompt, so batches pad little), each generation batch
  repeated `num_iterations x steps_per_generation` times as TRL's buffering expects,
  instead of repeating each prompt `num_generations` times.

Every step logs the gap between the trainer's logprobs of the stored tokens and the
sampler's (`sampling/sampling_logp_difference/{mean,max}`, a `runs` column), read from the
forward pass that computes the loss, so it costs nothing: at a round's first step it is
the sampler/trainer mismatch alone, later steps add what the optimiser changed since the
groups were sampled. With `vllm_importance_sampling_correction`,
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

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, nanstd, use_adapter

import store
from training.checkpointing import peft_wrapping
from training.datasets import select_grpo
from training.grpo_batch import GroupedRepeatSampler, pad_rows, padded, rows_as_tensors
from training.grpo_config import TrajlakeGRPOConfig
from training.grpo_rows import (
    bound_staleness,
    cut_to_max_length,
    drop_equal_reward_groups,
    fit_batch_to_rows,
    grpo_dataset,
)
from training.lora import trainable_policy
from training.metrics import NonFiniteLossGuard, RunsTableCallback
from training.mismatch import importance_weights, sampler_gap, weighted_advantages
from training.run import (
    CHECKPOINTS,
    TrainResult,
    check_adapter_dir,
    last_checkpoint,
    load_tokenizer,
    read_run_record,
    start_run,
    train_and_record,
)

# The round-start pass keeps no activations for a backward pass, so it batches this many
# times wider than a training step for the same memory.
ROUND_START_BATCH_FACTOR = 4
# Every replayed trajectory with token data: what `trajlake train grpo` trains on by default.
DEFAULT_GRPO_SQL = (
    "SELECT trajectory_id FROM trajectories WHERE source = 'replay' AND len(turns) > 0 "
    f"AND {store.OUTSIDE_VAL_SCENARIOS}"
)


def stored_reward(completions: list[Any], reward: list[float], **kwargs: Any) -> list[float]:
    """The reward stored in the lake for each trajectory (the row's `reward` column).

    `GRPOTrainer` requires a reward source; on stored groups the rewards are data, and this
    function names them in TRL's logs. It is never asked to score new completions.
    """
    return list(reward)


class StoredGroupsGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` that trains on stored, scored groups instead of sampling new ones."""

    _gap_batch: dict[str, Any] | None = None  # the batch whose loss is being computed (gap metric)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data_collator = rows_as_tensors

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
            repeat_count=self.num_iterations * self.args.steps_per_generation,
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

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        # The loss's own forward pass gives the trainer's logprobs of the stored tokens: the
        # sampler/trainer gap is read there (`_get_per_token_logps_and_entropies`), for free.
        self._gap_batch = inputs if self.args.measure_sampler_gap and model.training else None
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._gap_batch = None

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        batch, self._gap_batch = self._gap_batch, None
        if batch is not None:  # the first call of a loss computation: the policy's logprobs
            sampled = batch.get("sampling_per_token_logps", batch["old_per_token_logps"])
            mean_gap, max_gap = sampler_gap(
                out[0].detach(), sampled, batch["completion_mask"] * batch["tool_mask"]
            )
            self._metrics["train"]["sampling/sampling_logp_difference/mean"].append(mean_gap)
            self._metrics["train"]["sampling/sampling_logp_difference/max"].append(max_gap)
        return out

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
        metrics["sampling/importance_sampling_ratio/min"].append(kept.min().item())
        metrics["sampling/importance_sampling_ratio/mean"].append(kept.mean().item())
        metrics["sampling/importance_sampling_ratio/max"].append(kept.max().item())

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

        A no-grad pass, so it batches wider than training and groups rows of similar
        lengths (a group's members share their prompt): little of it is padding. Masked
        positions (tool results, glue) are kept as computed; the gap and the weights only
        ever read them through the loss mask.
        """
        dataset = self.train_dataset
        size = self.args.per_device_train_batch_size * ROUND_START_BATCH_FACTOR
        sizes = [
            (len(p), len(c)) for p, c in zip(dataset["prompt_ids"], dataset["completion_ids"], strict=True)
        ]
        order = sorted(range(len(sizes)), key=sizes.__getitem__)
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


def train_grpo(
    lake: store.Lake | str,
    sql: str,
    base_model: str | os.PathLike[str],
    adapter: str | os.PathLike[str] | None,
    output_dir: str | os.PathLike[str],
    config: TrajlakeGRPOConfig | None = None,
    *,
    resume: bool = False,
    as_of: Mapping[str, int] | None = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train (or continue) a LoRA adapter with GRPO on the stored groups `sql` selects.

    `adapter` is the adapter folder to continue from (the SFT stage's output), or None
    for a fresh LoRA on `base_model`. Selection, token data and configuration are
    checked before any model is loaded. Each logged step is a `runs` row (stage `grpo`);
    with `resume=True` training continues from the newest checkpoint. `as_of` reads the
    lake at the table versions of an earlier lineage.
    """
    lake = store.Lake.of(lake)
    base_model = str(base_model)
    adapter = str(adapter) if adapter is not None else None
    output_dir = Path(output_dir)
    config = config or TrajlakeGRPOConfig(output_dir=str(output_dir / CHECKPOINTS))
    config.output_dir = str(output_dir / CHECKPOINTS)
    check_adapter_dir(adapter)
    stale = 0
    if config.max_staleness is not None:
        sql, stale = bound_staleness(lake, sql, base_model, adapter, config.max_staleness, as_of)
    selection = select_grpo(
        lake,
        sql,
        reward_name=config.reward_name,
        scale_rewards=config.scale_rewards
        if isinstance(config.scale_rewards, str)
        else ("group" if config.scale_rewards else "none"),
        min_group_size=config.min_group_size,
        as_of=as_of,
    )
    examples = [cut_to_max_length(e, config.max_completion_length) for e in selection.examples]
    skipped_equal = 0
    if config.skip_equal_reward_groups:
        examples, skipped_equal = drop_equal_reward_groups(examples, selection.report.equal_reward_groups)
    config, batch_note = fit_batch_to_rows(config, len(examples))
    run_id = start_run(
        output_dir, "grpo", config.run_id, resume, {"base_model": base_model, "adapter": adapter, "sql": sql}
    )

    tokenizer = load_tokenizer(base_model)
    model, peft_config = trainable_policy(base_model, adapter, config, bf16=bool(config.bf16))
    guard = NonFiniteLossGuard()
    report = {
        "groups": selection.report.groups,
        "trajectories": selection.report.trajectories,
        "equal_reward_groups": len(selection.report.equal_reward_groups),
        "dropped_small_groups": len(selection.dropped_small_groups),
        "truncated": sum(e.truncated for e in examples),
        "skipped_equal_reward_trajectories": skipped_equal,
        "stale_trajectories": stale,
        **batch_note,
    }
    runs = RunsTableCallback(
        lake, run_id, "grpo", extra={"equal_reward_groups": report["equal_reward_groups"]}
    )
    with peft_wrapping():  # the trainer wraps the model in a fresh LoRA adapter (or a ref copy)
        trainer = StoredGroupsGRPOTrainer(
            model=model,
            reward_funcs=stored_reward,
            args=config,
            train_dataset=grpo_dataset(examples),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[runs, guard, *callbacks],
        )
    if config.vllm_importance_sampling_correction and not (resume and last_checkpoint(output_dir)):
        started = time.perf_counter()
        trainer.store_round_start_logprobs()
        report["round_start_logprobs_s"] = round(time.perf_counter() - started, 3)  # not in train_runtime
    parent = read_run_record(adapter) if adapter else None
    if adapter and parent is None:
        parent = {"adapter_dir": adapter, "stages": ["external"], "run_ids": []}
    return train_and_record(
        trainer,
        guard,
        stage="grpo",
        run_id=run_id,
        output_dir=output_dir,
        base_model=base_model,
        config=config,
        lineage=selection.lineage.to_dict(),
        resume=resume,
        report=report,
        parent=parent,
    )
