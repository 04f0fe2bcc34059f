"""Training stages: SFT on selected production conversations, GRPO on a round's scored groups.

Each pipeline run trains in its own folder, `<work>/<pipeline run id>/` (`run_dir`): a
retried flow run resumes its own checkpoints, and a new run never resumes a finished one.
Both return training's own `TrainResult` (the adapter folder, run id and steps the flow keeps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.config.sections import PipelineSettings, ScoreSettings, Selections
from flows.config.trainers import TrainSettings
from flows.stages.common import base_model, run_dir
from flows.stages.score import training_reward
from store.lake import Lake
from store.selections import grpo_trajectories_of
from training.replay.samplers import SamplerConfig

if TYPE_CHECKING:
    from training.run import TrainResult


def sft_stage(
    lake: Lake,
    pipeline_run: str,
    round_number: int = 0,
    adapter: str | None = None,
    *,
    select: Selections,
    train: TrainSettings,
    sampler: SamplerConfig,
    pipeline: PipelineSettings,
) -> TrainResult:
    """SFT a LoRA adapter (a fresh one, or `adapter` continued) on the trajectories `select.sft` picks,
    in the run's folder under `pipeline.work_dir`."""
    from training.sft import train_sft

    output = run_dir(lake, pipeline, pipeline_run, f"sft-{round_number}")
    sft_config = train.sft_config(str(output / "checkpoints"))
    return train_sft(lake, select.sft, base_model(sampler), output, sft_config, adapter=adapter, resume=True)


def grpo_stage(
    lake: Lake,
    pipeline_run: str,
    adapter: str | None,
    round_number: int,
    group_ids: list[str] | None = None,
    *,
    train: TrainSettings,
    score: ScoreSettings,
    sampler: SamplerConfig,
    pipeline: PipelineSettings,
) -> TrainResult:
    """GRPO on the stored, scored groups of this round (all replayed groups if none given), continuing
    `adapter`, on the reward `score.reward` names."""
    from training.grpo import train_grpo

    sql = grpo_trajectories_of(group_ids)  # the round's groups, outside the val scenarios
    output = run_dir(lake, pipeline, pipeline_run, f"grpo-{round_number}")
    grpo_config = train.grpo_config(str(output / "checkpoints"), reward_name=training_reward(score))
    return train_grpo(lake, sql, base_model(sampler), adapter, output, grpo_config, resume=True)
