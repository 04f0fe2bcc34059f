"""Training stages: SFT on selected production conversations, GRPO on a round's scored groups."""

from __future__ import annotations

from flows.config import TrajlakeConfig
from flows.stages.common import base_model, lake_of, work_dir
from flows.stages.score import replay_filter


def train_sft(config: TrajlakeConfig, round_number: int = 0) -> str:
    """SFT a LoRA adapter on the trajectories `select.sft` picks; returns its folder."""
    from training.sft import train_sft as sft

    output = work_dir(config, f"sft-{round_number}")
    sft_config = config.build("train.sft", output_dir=str(output / "checkpoints"))
    result = sft(lake_of(config), config.select.sft, base_model(config), output, sft_config, resume=True)
    return result.adapter_dir


def train_grpo(
    config: TrajlakeConfig, adapter: str | None, round_number: int, group_ids: list[str] | None = None
) -> str:
    """GRPO on the stored, scored groups of this round (all replayed groups if none given); returns the adapter."""
    from training.grpo import train_grpo as grpo

    sql = f"SELECT trajectory_id FROM trajectories WHERE {replay_filter(group_ids)} AND len(turns) > 0"
    output = work_dir(config, f"grpo-{round_number}")
    grpo_config = config.build(
        "train.grpo",
        output_dir=str(output / "checkpoints"),
        reward_name=config.score.reward,
    )
    result = grpo(lake_of(config), sql, base_model(config), adapter, output, grpo_config, resume=True)
    return result.adapter_dir
