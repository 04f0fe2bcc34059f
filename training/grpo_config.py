"""Configuration of the GRPO stage: TRL's `GRPOConfig` plus the fields trajlake adds.

Loss types, clipping (`epsilon`, `epsilon_high`, `delta`), KL (`beta`), importance
sampling level, `scale_rewards` and every optimiser setting are TRL's.
trajlake adds the LoRA shape (for a fresh adapter), the reward to train on and the
group filter. Notes on reused TRL fields:

- `temperature` is not a setting: TRL divides logits by it and the stored logprobs were
  taken at it, so `train_grpo` sets it to the temperature each replay recorded with its
  groups (this field's value stands only for rows that recorded none).
- `num_generations` is not used to form groups (groups come from the lake, each with
  its own size); it only has to divide the generation batch, so it is 2, and any other
  value is refused rather than silently replaced.
- `mask_truncated_completions` defaults to True here: a completion cut at the token
  limit has no meaningful end, so its tokens are masked out of the loss.
- `vllm_importance_sampling_correction` (TRL's name; here for any sampler) defaults to
  False: the stored sampling logprobs already are pi_old of the clipped ratio, and a
  sampler that computes the trainer's numbers (the transformers backend in fp32:
  |dlogp| ~ 1e-6) needs no correction. With a sampler whose numerics differ (vLLM, bf16)
  turn it on: pi_old becomes the trainer's logprobs before the round's first update and
  each token is weighted by the truncated (or masked) ratio pi_old / pi_sampler
  (`vllm_importance_sampling_mode`, default `token_truncate`, at
  `vllm_importance_sampling_clip_max`), as TRL does for vLLM and verl calls TIS.

trajlake's own round-level fields: `skip_equal_reward_groups` (DAPO's filter),
`max_staleness` (how many adapter versions old a group may be), `measure_sampler_gap`
(log the sampler/trainer logprob gap of every step to `runs`, at no cost) and
`tree_packing` (forward what a batch's rows share once: `training.tree_pack`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, cast

from trl import GRPOConfig

from store.errors import check_settings
from store.sampling import GROUP_TEMPERATURE_RULE, is_group_temperature
from training.advantages import SCALE_REWARDS, ScaleRewards
from training.checkpointing import CheckpointingFields
from training.device import bf16_supported, claim_cpu
from training.errors import BadHyperparameter
from training.lora import LoraFields

LOSS_TYPES: tuple[str, ...] = ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo")
IS_MODES: tuple[str, ...] = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass
class TrajlakeGRPOConfig(LoraFields, CheckpointingFields, GRPOConfig):  # type: ignore[misc]  # bool | None: unset means "on" (CheckpointingFields)
    """`GRPOConfig` for training on stored, scored groups."""

    # TRL fields the stored groups decide (the command line refuses them: they would be ignored)
    DECIDED_BY_THE_DATA: ClassVar[dict[str, str]] = {
        "temperature": "GRPO divides by the temperature each replay recorded with its groups",
        "num_generations": "groups come from the lake, each with its own size",
    }

    # Parameters that select the training data
    reward_name: str | None = field(
        default=None,
        metadata={
            "help": "Reward (rewards.name) to train on; optional when the selection carries exactly one."
        },
    )
    min_group_size: int = field(
        default=2, metadata={"help": "Groups with fewer scored trajectories are dropped (and listed)."}
    )
    skip_equal_reward_groups: bool = field(
        default=True,
        metadata={
            "help": "Leave groups whose rewards are all equal (zero advantage) out of the batches, as DAPO's "
            "dynamic sampling does: they carry no gradient, cost compute and dilute the token-normalised loss "
            "(kept when no group has unequal rewards)."
        },
    )
    max_staleness: int | None = field(
        default=None,
        metadata={
            "help": "Train only on groups sampled by the adapter being continued or its N nearest ancestors "
            "(0: on-policy groups only); older groups are refused before any model loads. None: no bound."
        },
    )
    # Parameters that control the sampler/trainer mismatch
    measure_sampler_gap: bool = field(
        default=True,
        metadata={
            "help": "Log each step's gap between the trainer's and the sampler's logprobs of the stored tokens "
            "(`sampling/sampling_logp_difference/*` in `runs`), read from the loss's own forward pass: at a "
            "round's first step the mismatch alone, later steps add the optimiser's drift since sampling."
        },
    )
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={
            "help": "Truncated importance sampling (TIS) of the sampler/trainer mismatch, for any sampler: "
            "pi_old from the trainer, tokens weighted by pi_old / pi_sampler; for vLLM or bf16 samplers."
        },
    )
    vllm_importance_sampling_mode: str = field(
        default="token_truncate",
        metadata={"help": "token_truncate, token_mask, sequence_truncate or sequence_mask (TRL's modes)."},
    )
    # Parameters that control the forward passes
    tree_packing: bool = field(
        default=True,
        metadata={
            "help": "Forward each batch's rows once as a prefix tree over their token ids: a group's shared "
            "prompt and shared first turns are computed once in the policy, round-start and reference passes, "
            "with a mask that lets each token see only its own row's tokens (per-row results equal the unpacked "
            "forward). The share of tokens saved is logged per step (`tree_packing/saved_token_share` in "
            "`runs`); a model whose attention takes no mask falls back to unpacked rows with one warning."
        },
    )
    # Defaults that differ from TRL's
    mask_truncated_completions: bool = field(
        default=True, metadata={"help": "Mask completions that hit the token limit out of the loss."}
    )
    num_generations: int | None = field(
        default=2, metadata={"help": "Unused for stored groups (group sizes come from the lake); keep at 2."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log (and write to `runs`) every N steps."})
    save_steps: float = field(
        default=50, metadata={"help": "Checkpoint every N steps (resume from the latest)."}
    )
    report_to: str | list[str] | None = field(
        default="none", metadata={"help": "Also report to these integrations (wandb, tensorboard, ...)."}
    )
    max_completion_length: int | None = field(
        default=1024,
        metadata={"help": "Longest completion kept (longer ones are cut and masked as truncated)."},
    )

    def __post_init__(self) -> None:
        self.check_lora()
        self.resolve_checkpointing()
        if self.bf16 is None and not self.fp16:
            self.bf16 = bf16_supported()  # TRL defaults to bf16, which CPUs and older GPUs reject
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        check_settings(
            self,
            ("loss_type", self.loss_type in LOSS_TYPES, f"one of TRL's: {', '.join(LOSS_TYPES)}"),
            (
                "scale_rewards",
                self.scale_rewards in SCALE_REWARDS or self.scale_rewards in (True, False),
                f"one of {', '.join(SCALE_REWARDS)}",
            ),
            ("learning_rate", self.learning_rate > 0, "positive"),
            ("temperature", is_group_temperature(self.temperature), GROUP_TEMPERATURE_RULE),
            ("epsilon", self.epsilon > 0, "positive"),
            (
                "epsilon_high",
                self.epsilon_high is None or self.epsilon_high > 0,
                "positive (or None: `epsilon`)",
            ),
            ("beta", self.beta >= 0, ">= 0 (the KL weight)"),
            (
                "max_staleness",
                self.max_staleness is None or self.max_staleness >= 0,
                ">= 0 (or None: no bound)",
            ),
            (
                "vllm_importance_sampling_mode",
                self.vllm_importance_sampling_mode in IS_MODES,
                f"one of {', '.join(IS_MODES)}",
            ),
            ("min_group_size", self.min_group_size >= 2, ">= 2 (GRPO compares samples)"),
            (
                "num_generations",
                self.num_generations in (None, 2),
                f"2 (left at it): {self.DECIDED_BY_THE_DATA['num_generations']}",
            ),
            (
                "per_device_train_batch_size",
                self.generation_batch_size is not None or (self.per_device_train_batch_size * steps) % 2 == 0,
                f"such that it x `steps_per_generation` ({steps}) is even: TRL needs whole pairs per "
                "generation batch",
            ),
            error=BadHyperparameter,
        )
        self.num_generations = 2  # None: TRL would take its own default (8), which must divide the batch
        claim_cpu(self)  # several processes on CPUs: one data-parallel run (training.distributed)
        super().__post_init__()

    @property
    def reward_scaling(self) -> ScaleRewards:
        """`scale_rewards` as one of `SCALE_REWARDS` (TRL also takes True for group, False for none)."""
        if isinstance(self.scale_rewards, str):
            return cast(ScaleRewards, self.scale_rewards)  # checked in __post_init__
        return "group" if self.scale_rewards else "none"
