"""GRPO on stored groups: loss/gradient parity with stock TRL, masks, metrics, KL, SFT continuation, NaN guard."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from store.catalog.connection import connect
from store.errors import SelectionError
from store.lake import Lake
from store.metrics import SAMPLER_GAP_MEAN, TREE_PACKING_SAVED_SHARE
from store.writer import write
from tests.store.helpers import run_metrics
from tests.training.train_helpers import (
    check_parity_with_stock,
    grpo_test_config,
    parity_trainers,
    reward,
    stored_groups,
    traj,
    turn,
)
from training.datasets import sampled_temperature
from training.errors import BadHyperparameter, MissingTokenData, NonFiniteLoss
from training.grpo import grpo_trainer_class, train_grpo
from training.grpo_config import LOSS_TYPES, TrajlakeGRPOConfig
from training.grpo_trainer import StoredGroupsGRPOTrainer

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ALL = "SELECT trajectory_id FROM trajectories"
TEMPERATURE = 0.7


def config(tmp_path: Path, **kw: object) -> TrajlakeGRPOConfig:
    return grpo_test_config(tmp_path, **kw)


@pytest.fixture(scope="module")
def groups_lake(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("grpo") / "lake"))
    rows, rewards = stored_groups(str(tiny_model), groups=3, size=4, temperature=TEMPERATURE)
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    return lake


# --- parity with stock TRL ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trainers(groups_lake: Lake, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return parity_trainers(groups_lake, str(tiny_model), tmp_path_factory.mktemp("parity"), TEMPERATURE)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_gradients_equal_stock_trl(trainers, loss_type: str) -> None:  # type: ignore[no-untyped-def]
    check_parity_with_stock(*trainers, loss_type)


# --- the batch the trainer builds -----------------------------------------------------------------


def test_stored_batch_masks_tools_and_truncation(trainers) -> None:  # type: ignore[no-untyped-def]
    ours, _, _ = trainers
    row = {
        "prompt_ids": [5, 6, 7],
        "completion_ids": [10, 11, 50, 51, 12],
        "tool_mask": [1, 1, 0, 0, 1],
        "logprobs": [-0.1, -0.2, 0.0, 0.0, -0.3],
        "truncated": False,
        "reward": 1.0,
        "advantage": 0.5,
    }
    cut = {
        **row,
        "completion_ids": [10, 11],
        "tool_mask": [1, 1],
        "logprobs": [-0.1, -0.2],
        "truncated": True,
        "advantage": -0.5,
    }
    batch = ours.stored_batch([row, cut])
    assert batch["prompt_ids"].tolist() == [[5, 6, 7], [5, 6, 7]]
    assert batch["tool_mask"][0].tolist() == [1, 1, 0, 0, 1]
    assert batch["completion_mask"][0].tolist() == [1, 1, 1, 1, 1]
    assert batch["completion_mask"][1].sum().item() == 0  # truncated: masked out entirely
    assert batch["old_per_token_logps"][0].tolist() == pytest.approx([-0.1, -0.2, 0.0, 0.0, -0.3])
    assert batch["advantages"].tolist() == [0.5, -0.5]


# --- end to end --------------------------------------------------------------------------------------


def test_grpo_divides_by_the_temperature_the_groups_recorded(
    groups_lake: Lake, tiny_model: Path, tmp_path: Path
) -> None:
    # The config's temperature (TRL's default, 1.0) is not what the groups were sampled at (0.7):
    # the recorded one is used, so the first step's policy logprobs are the stored ones.
    given = config(tmp_path, max_steps=1)
    before = copy.deepcopy(given)
    run = train_grpo(groups_lake, ALL, tiny_model, None, tmp_path / "run", given)
    assert run.report["temperature"] == TEMPERATURE
    # the run's temperature and output folder went on a copy: the caller's config is as it was given
    assert given == before and given.temperature == 1.0 and given.output_dir == str(tmp_path / "ckpt")
    ((_, _, metrics),) = run_metrics(groups_lake, run.run_id)
    assert metrics[SAMPLER_GAP_MEAN] < 1e-4


def test_groups_sampled_at_different_temperatures_are_refused(lake: Lake, tmp_path: Path) -> None:
    rows = [
        traj(
            f"t{k}",
            group_id="g",
            scenario_id="s",
            turns=[turn([1, 2], [3], [-0.5])],
            sampling={"temperature": 0.7 + 0.3 * (k % 2)},
        )
        for k in range(4)
    ]
    write(lake, "trajectories", rows)
    write(lake, "rewards", [reward(f"t{k}", float(k % 2), group_id="g") for k in range(4)])
    with pytest.raises(
        SelectionError, match=r"different temperatures: 0.7 \(2 trajectories\), 1 \(2"
    ) as info:
        train_grpo(lake, ALL, "no-model-needed", None, tmp_path / "run", config(tmp_path))
    assert info.value.reason == "mixed_temperatures"


def test_train_grpo_logs_metrics_and_changes_lora(
    groups_lake: Lake, tiny_model: Path, tmp_path: Path
) -> None:
    result = train_grpo(groups_lake, ALL, tiny_model, None, tmp_path / "run", config(tmp_path, max_steps=3))
    assert result.global_step == 3 and result.stages == ["grpo"]
    assert result.report["groups"] == 3 and result.report["trajectories"] == 12
    weights = load_file(str(Path(result.adapter_dir) / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # LoRA B starts at zero: every one moved
    rows = run_metrics(groups_lake, result.run_id)
    assert [r[0] for r in rows] == [1, 2, 3] and {r[1] for r in rows} == {"grpo"}
    first = rows[0][2]
    for key in (
        "loss",
        "grad_norm",
        "reward",
        "reward_std",
        "entropy",
        "clip_ratio/region_mean",
        "tokens_per_second",
    ):
        assert key in first, key
    assert "train_runtime" in rows[-1][2]  # the summary merges into the last step's row
    record = json.loads((Path(result.adapter_dir) / "trajlake_run.json").read_text())
    assert record["lineage"]["trajectory_count"] == 12


def test_the_one_seam_trainer_trains_and_logs_without_its_opt_in_layer(
    groups_lake: Lake, tiny_model: Path, tmp_path: Path
) -> None:
    """Tree packing and the sampler gap off: the base trainer alone (TRL's forward untouched)
    trains, and the metrics it keeps itself reach `runs` through `log`."""
    cfg = config(tmp_path, max_steps=2, tree_packing=False, measure_sampler_gap=False)
    assert grpo_trainer_class(cfg) is StoredGroupsGRPOTrainer
    result = train_grpo(groups_lake, ALL, tiny_model, None, tmp_path / "run", cfg)
    assert result.global_step == 2
    logged = [m for _, _, m in run_metrics(groups_lake, result.run_id)]
    assert len(logged) == 2
    for step in logged:
        for key in ("loss", "entropy", "reward", "reward_std", "completions/mean_length", "num_tokens"):
            assert key in step, key
        assert SAMPLER_GAP_MEAN not in step and TREE_PACKING_SAVED_SHARE not in step
        assert 0.0 <= step["frac_reward_zero_std"] <= 1.0
    assert logged[1]["num_tokens"] > logged[0]["num_tokens"] > 0  # the running count, not a per-step one


def test_continue_from_adapter_with_kl(groups_lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    first = train_grpo(groups_lake, ALL, tiny_model, None, tmp_path / "a", config(tmp_path, max_steps=1))
    second = train_grpo(
        groups_lake,
        ALL,
        tiny_model,
        first.adapter_dir,
        tmp_path / "b",
        config(tmp_path, max_steps=2, beta=0.1),
    )
    assert second.stages == ["grpo", "grpo"] and second.run_ids == [first.run_id, second.run_id]
    kl = (
        connect(groups_lake)
        .sql(f"SELECT scalars['kl'] FROM runs WHERE run_id = '{second.run_id}' AND step = 2")
        .fetchall()[0][0]
    )
    assert kl is not None and kl > 0  # reference = the adapter GRPO started from; the policy moved off it
    saved = load_file(str(Path(second.adapter_dir) / "adapter_model.safetensors"))
    assert not any(".ref." in k for k in saved)  # only the trained adapter is saved


class PoisonAtStep(TrainerCallback):
    """Fault injection: make the weights NaN when a given step begins."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
        if state.global_step == self.step - 1:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "lora_A" in name:
                        p.fill_(float("nan"))


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(
    groups_lake: Lake, tiny_model: Path, tmp_path: Path
) -> None:
    cfg = config(tmp_path, max_steps=5, save_strategy="steps", save_steps=1)
    with pytest.raises(NonFiniteLoss) as err:
        train_grpo(groups_lake, ALL, tiny_model, None, tmp_path / "run", cfg, callbacks=[PoisonAtStep(3)])
    assert err.value.step == 3
    assert err.value.last_checkpoint is not None and err.value.last_checkpoint.endswith("checkpoint-2")
    kept = load_file(str(Path(err.value.last_checkpoint) / "adapter_model.safetensors"))
    assert all(torch.isfinite(v).all() for v in kept.values())
    assert not (tmp_path / "run" / "checkpoints" / "checkpoint-3").exists()
    assert not (tmp_path / "run" / "adapter").exists()  # no adapter from a broken run


# --- errors before any work -----------------------------------------------------------------------


def test_text_only_selection_fails_before_loading_a_model(lake: Lake, tmp_path: Path) -> None:
    write(
        lake,
        "trajectories",
        [traj("p1", group_id="g", source="otel"), traj("p2", group_id="g", source="otel")],
    )
    write(lake, "rewards", [reward("p1", 1.0, group_id="g"), reward("p2", 0.0, group_id="g")])
    with pytest.raises(MissingTokenData):
        train_grpo(lake, ALL, tmp_path / "no-model-here", None, tmp_path / "run", config(tmp_path))
    assert not (tmp_path / "run").exists()


def test_empty_selection_fails_before_work(lake: Lake, tmp_path: Path) -> None:
    write(lake, "trajectories", [traj("a", group_id="g", turns=[turn([1], [2])])])
    with pytest.raises(SelectionError):
        train_grpo(
            lake, ALL + " WHERE false", tmp_path / "no-model-here", None, tmp_path / "run", config(tmp_path)
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"loss_type": "ppo"}, "loss_type"),
        ({"lora_r": 12}, "lora_r"),
        ({"beta": -0.1}, "beta"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"per_device_train_batch_size": 3}, "per_device_train_batch_size"),
        ({"min_group_size": 1}, "min_group_size"),
        # groups come from the lake: a group size here would be ignored, so it is refused
        ({"num_generations": 4}, "num_generations"),
    ],
)
def test_bad_hyperparameters(tmp_path: Path, kw: dict, name: str) -> None:
    with pytest.raises(BadHyperparameter) as err:
        config(tmp_path, **kw)
    assert err.value.field == name and f"`{name}`" in str(err.value)


def test_resume_grpo_from_checkpoint(groups_lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = train_grpo(
        groups_lake,
        ALL,
        tiny_model,
        None,
        out,
        config(tmp_path, max_steps=2, save_strategy="steps", save_steps=1),
    )
    resumed = train_grpo(
        groups_lake,
        ALL,
        tiny_model,
        None,
        out,
        config(tmp_path, max_steps=4, save_strategy="steps", save_steps=1),
        resume=True,
    )
    assert resumed.run_id == first.run_id and resumed.global_step == 4
    assert resumed.report["resumed_from"].endswith("checkpoint-2")
    steps = (
        connect(groups_lake)
        .sql(f"SELECT step FROM runs WHERE run_id = '{first.run_id}' ORDER BY step")
        .fetchall()
    )
    assert [s[0] for s in steps] == [1, 2, 3, 4]


def test_missing_adapter_folder_fails_before_work(groups_lake: Lake, tmp_path: Path) -> None:
    with pytest.raises(BadHyperparameter) as err:
        train_grpo(
            groups_lake, ALL, tmp_path / "no-model", tmp_path / "nope", tmp_path / "run", config(tmp_path)
        )
    assert err.value.field == "adapter" and "adapter_config.json" in str(err.value)
    assert not (tmp_path / "run").exists()


def test_the_recorded_temperature_is_one_positive_value_or_none() -> None:
    assert sampled_temperature(ALL, [{"temperature": None}, {"temperature": None}]) is None  # config's then
    assert sampled_temperature(ALL, [{"temperature": 0.8}, {"temperature": None}]) == 0.8
    with pytest.raises(SelectionError) as info:  # TRL would divide the logits by zero
        sampled_temperature(ALL, [{"temperature": 0.0}, {"temperature": 0.0}])
    assert info.value.reason == "greedy_groups"
