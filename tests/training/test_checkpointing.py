"""Activation checkpointing: its default follows the device, and it changes no number of a step.

Recomputing activations only trades time for memory, so the default may pick either without
changing what is learned: two SFT steps on the tiny model, recomputed and not, log the same
losses, take the same LoRA gradients and end at the same LoRA weights (float32 tolerance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.training.train_helpers import msg, traj
from training import device
from training.grpo_config import TrajlakeGRPOConfig
from training.sft import train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # two SFT runs of the tiny model

ALL = "SELECT trajectory_id FROM trajectories"


@pytest.mark.parametrize("config_class", [TrajlakeSFTConfig, TrajlakeGRPOConfig])
def test_unset_checkpointing_is_off_on_a_cpu_on_with_an_accelerator_and_a_setting_wins(
    config_class: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert device.cpu_only()  # this machine trains on its CPU
    # unset on a CPU: off (recomputing the forward made SmolLM2's steps ~25% slower)
    assert config_class(output_dir="x").activation_checkpointing is False
    # set by the user, under either name: kept
    assert config_class(output_dir="x", activation_checkpointing=True).activation_checkpointing is True
    with pytest.warns(FutureWarning, match="gradient_checkpointing"):  # transformers' warning, rightly
        old_name = config_class(output_dir="x", gradient_checkpointing=True)
    assert old_name.activation_checkpointing is True  # transformers carries the old name over
    # with an accelerator: TRL's choice, on; unless the run is told to train on the CPU
    monkeypatch.setattr(device, "cpu_only", lambda: False)
    assert device.recompute_activations() is True
    assert device.recompute_activations(use_cpu=True) is False
    assert config_class(output_dir="x", use_cpu=True).activation_checkpointing is False


class StepRecorder(TrainerCallback):  # type: ignore[misc]  # transformers ships no type stubs
    """Each optimizer step's LoRA gradients (before the update), weights after it, and whether the
    model recomputed its activations."""

    def __init__(self) -> None:
        self.grads: list[dict[str, torch.Tensor]] = []
        self.weights: list[dict[str, torch.Tensor]] = []
        self.recomputed: list[bool] = []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        model = kw["model"]
        self.recomputed.append(bool(model.is_activation_checkpointing))
        self.grads.append(
            {
                n: p.grad.detach().clone()
                for n, p in model.named_parameters()
                if "lora_" in n and p.grad is not None
            }
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.weights.append(
            {n: p.detach().clone() for n, p in kw["model"].named_parameters() if "lora_" in n}
        )


def sft_steps(lake: Lake, model: Path, out: Path, **setting: Any) -> tuple[list[float], StepRecorder]:
    config = TrajlakeSFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=2,  # the second step's gradients reach lora_A (the first's B is still zero)
        learning_rate=5e-3,
        max_length=512,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        **setting,
    )
    recorder = StepRecorder()
    result = train_sft(lake, ALL, model, out, config, callbacks=[recorder])
    with connect(lake) as con:
        losses = [
            row[0]
            for row in con.execute(
                "SELECT scalars['loss'] FROM runs WHERE run_id = ? ORDER BY step", [result.run_id]
            ).fetchall()
        ]
    return losses, recorder


def test_a_step_is_the_same_with_and_without_recomputed_activations(tiny_model: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    write(
        lake,
        "trajectories",
        [
            traj(
                f"c{i}",
                messages=[
                    msg("user", f"What is {i} + {2 * i}?"),
                    msg("assistant", f"The answer is {3 * i}."),
                ],
            )
            for i in range(8)
        ],
    )
    default_losses, default = sft_steps(lake, tiny_model, tmp_path / "default")
    on_losses, on = sft_steps(lake, tiny_model, tmp_path / "on", activation_checkpointing=True)

    # the default on this CPU is honoured by the trainer: nothing recomputed; set on, it is
    assert default.recomputed == [False, False] and on.recomputed == [True, True]
    assert len(default_losses) == 2 and default_losses == pytest.approx(on_losses, rel=1e-5)
    for step in range(2):
        assert default.grads[step].keys() == on.grads[step].keys()
        assert any("lora_A" in n and g.abs().sum() > 0 for n, g in default.grads[step].items()) == (step == 1)
        for name, grad in default.grads[step].items():
            torch.testing.assert_close(grad, on.grads[step][name], rtol=1e-4, atol=1e-7, msg=name)
        for name, weight in default.weights[step].items():
            torch.testing.assert_close(weight, on.weights[step][name], rtol=1e-5, atol=1e-7, msg=name)
    # and the step learned something: LoRA's B left zero
    assert any("lora_B" in n and w.abs().sum() > 0 for n, w in default.weights[0].items())
