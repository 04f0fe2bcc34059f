"""A replay and the training steps reach no library deprecation warning: trajlake calls the current
transformers APIs (`cache`, `activation_checkpointing`), so nothing scrolls past on every run."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from store.lake import Lake
from store.writer import write
from tests.training.train_helpers import msg, stored_groups, traj
from training.grpo import train_grpo
from training.grpo_config import TrajlakeGRPOConfig
from training.replay.samplers import SamplingParams, make_sampler
from training.replay.scenario_io import load_scenarios
from training.replay.stage import ReplayConfig, replay
from training.sft import train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # trains (SFT and GRPO steps): outside the inner loop

LIBRARIES = ("transformers", "trl", "peft", "accelerate", "torch")


@contextmanager
def no_deprecations() -> Iterator[None]:
    """Fail when a DeprecationWarning or FutureWarning is raised from the training libraries inside."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    found = [
        f"{w.category.__name__} {w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, (DeprecationWarning, FutureWarning))
        and any(f"/{name}/" in w.filename for name in LIBRARIES)
    ]
    assert not found, "\n".join(found)


def test_a_replay_and_training_steps_emit_no_deprecation_warning(tiny_model: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    write(
        lake,
        "trajectories",
        [
            traj(f"c{i}", messages=[msg("user", f"What is {i} + 2?"), msg("assistant", f"{i + 2}")])
            for i in range(4)
        ],
    )
    # Activation checkpointing on (TRL's default, trajlake's with an accelerator), which warned
    # under its old name; on a CPU it is off by default (`training.device.recompute_activations`).
    with no_deprecations():
        sft_config = TrajlakeSFTConfig(
            output_dir=str(tmp_path / "x"),
            per_device_train_batch_size=2,
            max_steps=1,
            save_strategy="no",
            activation_checkpointing=True,
        )
        sft = train_sft(
            lake, "SELECT trajectory_id FROM trajectories", tiny_model, tmp_path / "sft", sft_config
        )
    assert sft.global_step == 1 and sft_config.activation_checkpointing is True

    # A replay through the SFT adapter: PEFT loads it, and every group shares its prompt's prefill.
    scenarios = tmp_path / "scenarios.jsonl"
    scenarios.write_text(
        "\n".join(json.dumps({"messages": [{"role": "user", "content": f"{i} + 1?"}]}) for i in range(2))
    )
    load_scenarios(lake, scenarios)
    with no_deprecations(), make_sampler("transformers", str(tiny_model), adapter=sft.adapter_dir) as sampler:
        result = replay(
            lake,
            "SELECT scenario_id FROM scenarios",
            sampler,
            ReplayConfig(group_size=2, sampling=SamplingParams(max_tokens=4)),
            progress=False,
        )
    assert len(result.group_ids) == 2 and result.failed == []

    # A GRPO step continuing from the SFT adapter (PEFT loads it trainable).
    groups = Lake(str(tmp_path / "groups"))
    rows, rewards = stored_groups(str(tiny_model), groups=2, size=2)
    write(groups, "trajectories", rows)
    write(groups, "rewards", rewards)
    with no_deprecations():
        grpo_config = TrajlakeGRPOConfig(
            output_dir=str(tmp_path / "y"), per_device_train_batch_size=4, max_steps=1, save_strategy="no"
        )
        grpo = train_grpo(
            groups,
            "SELECT trajectory_id FROM trajectories",
            tiny_model,
            sft.adapter_dir,
            tmp_path / "grpo",
            grpo_config,
        )
    assert grpo.global_step == 1
