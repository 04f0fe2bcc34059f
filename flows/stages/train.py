"""Training stages: SFT on selected production conversations, GRPO on a round's scored groups.

Each pipeline run trains in its own folder, `<work>/<pipeline run id>/` (`run_dir`): a
retried flow run resumes its own checkpoints, and a new run never resumes a finished one.
Both return training's own `TrainResult` (the adapter folder, run id and steps the flow keeps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.config.root import Settings
from flows.stages.common import base_model, lake_of, run_dir
from flows.stages.score import training_reward
from store.selections import grpo_trajectories_of

if TYPE_CHECKING:
    from training.run import TrainResult


def train_sft(
    config: Settings, pipeline_run: str, round_number: int = 0, adapter: str | None = None
) -> TrainResult:
    """SFT a LoRA adapter (a fresh one, or `adapter` continued) on the trajectories `select.sft` picks."""
    from training.sft import train_sft as sft

    output = run_dir(config, pipeline_run, f"sft-{round_number}")
    sft_config = config.train.sft_config(str(output / "checkpoints"))
    return sft(
        lake_of(config),
        config.select.sft,
        base_model(config),
        output,
        sft_config,
        adapter=adapter,
        resume=True,
    )


def train_grpo(
    config: Settings,
    pipeline_run: str,
    adapter: str | None,
    round_number: int,
    group_ids: list[str] | None = None,
) -> TrainResult:
    """GRPO on the stored, scored groups of this round (all replayed groups if none given), continuing
    `adapter`."""
    from training.grpo import train_grpo as grpo

    sql = grpo_trajectories_of(group_ids)  # the round's groups, outside the val scenarios
    output = run_dir(config, pipeline_run, f"grpo-{round_number}")
    grpo_config = config.train.grpo_config(str(output / "checkpoints"), reward_name=training_reward(config))
    return grpo(lake_of(config), sql, base_model(config), adapter, output, grpo_config, resume=True)
