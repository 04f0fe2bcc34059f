"""A GRPO round's rows: all-equal groups skipped, staleness bound, batch fitted, sampler/trainer gap and TIS."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from store.catalog.connection import connect
from store.errors import SelectionError
from store.lake import Lake
from store.metrics import IMPORTANCE_RATIO_MEAN, SAMPLER_GAP_MAX, SAMPLER_GAP_MEAN
from store.writer import write
from tests.store.helpers import run_metrics as run_records
from tests.training.test_grpo import ALL, TEMPERATURE, config
from tests.training.train_helpers import stored_groups
from training.datasets import select_grpo
from training.grpo import StoredGroupsGRPOTrainer, grpo_dataset, stored_reward, train_grpo
from training.grpo_batch import GroupedRepeatSampler
from training.grpo_rows import fit_batch_to_rows, policy_lineage, within_staleness
from training.models.adapters import peft_wrapping

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


def groups_lake(tmp_path: Path, tiny_model: Path, *, equal: tuple[str, ...] = (), drift: float = 0.0) -> Lake:
    """3 groups of 4 with on-policy logprobs; `equal` groups all solved; `drift` shifts every stored logprob."""
    lake = Lake(str(tmp_path / "lake"))
    rows, rewards = stored_groups(str(tiny_model), groups=3, size=4, temperature=TEMPERATURE)
    for r in rewards:
        if r["group_id"] in equal:
            r["value"] = 1.0
    for row in rows:
        for t in row["turns"]:
            t["logprobs"] = [lp - drift for lp in t["logprobs"]]
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    return lake


def run_metrics(lake: Lake, run_id: str) -> list[dict]:
    return [metrics for _, _, metrics in run_records(lake, run_id)]


def test_all_equal_groups_leave_the_batches(tiny_model: Path, tmp_path: Path) -> None:
    lake = groups_lake(tmp_path, tiny_model, equal=("g0",))  # every sample of g0 solved it: no signal
    kept = train_grpo(lake, ALL, tiny_model, None, tmp_path / "a", config(tmp_path))
    assert kept.report["equal_reward_groups"] == 1 and kept.report["skipped_equal_reward_trajectories"] == 4
    every = train_grpo(
        lake, ALL, tiny_model, None, tmp_path / "b", config(tmp_path, skip_equal_reward_groups=False)
    )
    assert every.report["skipped_equal_reward_trajectories"] == 0


def test_batch_shrinks_to_the_rows_left(tiny_model: Path, tmp_path: Path) -> None:
    cfg = config(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    same, note = fit_batch_to_rows(cfg, 16)
    assert same is cfg and note == {}
    smaller, note = fit_batch_to_rows(cfg, 7)
    assert note == {"batch_size_reduced_to": 6} and smaller.per_device_train_batch_size == 6
    assert smaller.gradient_accumulation_steps == 1 and smaller.generation_batch_size == 6
    # two groups of 4 equal out of three: 4 rows left under a generation batch of 16, still trains
    lake = groups_lake(tmp_path, tiny_model, equal=("g0", "g1"))
    cfg = config(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=2, max_steps=1)
    result = train_grpo(lake, ALL, tiny_model, None, tmp_path / "run", cfg)
    assert result.report["batch_size_reduced_to"] == 4 and result.global_step == 1


def test_batches_split_the_rows_evenly(tiny_model: Path, tmp_path: Path) -> None:
    # TRL's sampler drops what does not fill a whole batch: 20 rows in batches of 16 would train 16
    cfg = config(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    evened, note = fit_batch_to_rows(cfg, 20)
    assert note == {"batch_size_reduced_to": 5} and evened.generation_batch_size == 10
    assert evened.gradient_accumulation_steps == evened.steps_per_generation == 2  # steps keep their size
    odd = config(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=3)
    # an odd number of micro-steps takes micro-batches of whole pairs
    assert fit_batch_to_rows(odd, 20)[0].per_device_train_batch_size == 2
    single = config(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=2)
    assert fit_batch_to_rows(single, 3) == (single, {})  # one row a micro-step cannot be split further
    # 3 groups of 4 under a batch of 8: two steps of 6 rows, none left out (was one step of 8)
    lake = groups_lake(tmp_path, tiny_model)
    result = train_grpo(
        lake, ALL, tiny_model, None, tmp_path / "run", config(tmp_path, per_device_train_batch_size=8)
    )
    assert result.report["batch_size_reduced_to"] == 6 and result.global_step == 2


def test_sampler_gap_is_written_to_runs_every_step(tiny_model: Path, tmp_path: Path) -> None:
    on_policy_lake = groups_lake(tmp_path / "on", tiny_model)
    on_policy = train_grpo(on_policy_lake, ALL, tiny_model, None, tmp_path / "a", config(tmp_path))
    drifted_lake = groups_lake(
        tmp_path / "off", tiny_model, drift=0.5
    )  # a sampler less sure than the trainer
    drifted = train_grpo(drifted_lake, ALL, tiny_model, None, tmp_path / "b", config(tmp_path))
    assert "round_start_logprobs_s" not in drifted.report  # measured on the loss's own pass: no extra one
    first, second = run_metrics(on_policy_lake, on_policy.run_id)
    assert first[SAMPLER_GAP_MEAN] < 1e-4  # fp32 sampler = the trainer, before updates
    assert second[SAMPLER_GAP_MEAN] > 1e-3  # then what the first update moved
    first, second = run_metrics(drifted_lake, drifted.run_id)
    assert first[SAMPLER_GAP_MEAN] == pytest.approx(0.5, abs=1e-3)
    assert first[SAMPLER_GAP_MAX] == pytest.approx(0.5, abs=1e-3)
    assert second[SAMPLER_GAP_MEAN] == pytest.approx(0.5, abs=0.2)
    assert IMPORTANCE_RATIO_MEAN not in first  # measured, not corrected
    silent = train_grpo(
        drifted_lake, ALL, tiny_model, None, tmp_path / "c", config(tmp_path, measure_sampler_gap=False)
    )
    assert SAMPLER_GAP_MEAN not in run_metrics(drifted_lake, silent.run_id)[0]


def test_importance_sampling_correction(tiny_model: Path, tmp_path: Path) -> None:
    """On-policy fp32 samples: weights 1 and the loss unchanged; a drifted sampler: advantages reweighted."""
    examples = select_grpo(groups_lake(tmp_path, tiny_model), ALL).examples
    rows = [e.to_row() for e in examples[:4]]
    advantages = torch.tensor([r["advantage"] for r in rows]).unsqueeze(1)
    losses = {}
    for correct in (False, True):
        with peft_wrapping():  # as `train_grpo` wraps: PEFT's probe warning is not ours to see
            trainer = StoredGroupsGRPOTrainer(
                model=str(tiny_model),
                reward_funcs=stored_reward,
                # the trainer built by hand: `train_grpo` would take the groups' recorded temperature
                args=config(
                    tmp_path / str(correct),
                    vllm_importance_sampling_correction=correct,
                    temperature=TEMPERATURE,
                ),
                train_dataset=grpo_dataset(examples),
                peft_config=config(tmp_path).lora_config(),
            )
        trainer.current_gradient_accumulation_steps = 1
        batch = trainer._generate_and_score_completions(rows)
        losses[correct] = trainer.compute_loss(trainer.model, batch).item()
    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    weights = batch["advantages"] / advantages
    assert torch.allclose(
        weights[mask], torch.ones_like(weights[mask]), atol=1e-3
    )  # the sampler was the trainer
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)
    drifted = [{**r, "logprobs": [lp - 0.5 for lp in r["logprobs"]]} for r in rows]
    batch = trainer._generate_and_score_completions(drifted)
    ratio = batch["advantages"] / advantages
    assert torch.allclose(
        ratio[mask], torch.full_like(ratio[mask], math.exp(0.5)), rtol=1e-3
    )  # pi_old / pi_sampler
    assert batch["old_per_token_logps"][mask].tolist() == pytest.approx(
        [lp for r in rows for lp, m in zip(r["logprobs"], r["tool_mask"], strict=True) if m], abs=1e-4
    )  # pi_old is the trainer's own, not the drifted sampler's
    # train_grpo stores pi_old before the first update, so later steps still see the round's start
    trainer.store_round_start_logprobs()
    for row in trainer.train_dataset:  # every row, in its own place (the pass batches them by length)
        pairs = [
            (t, s)
            for t, s, m in zip(row["trainer_logprobs"], row["logprobs"], row["tool_mask"], strict=True)
            if m
        ]
        assert [t for t, _ in pairs] == pytest.approx([s for _, s in pairs], abs=1e-4)


def test_max_staleness_keeps_recent_policies(tiny_model: Path, tmp_path: Path) -> None:
    base = str(tiny_model)
    lake = groups_lake(tmp_path, tiny_model)
    first = train_grpo(lake, ALL, tiny_model, None, tmp_path / "a", config(tmp_path, max_steps=1))
    second = train_grpo(
        lake, ALL, tiny_model, first.adapter_dir, tmp_path / "b", config(tmp_path, max_steps=1)
    )
    # named as a sampler names them: the model folder's name, each adapter's run id
    newest, older, name = (
        f"{tiny_model.name}+{second.run_id}",
        f"{tiny_model.name}+{first.run_id}",
        tiny_model.name,
    )
    assert policy_lineage(base, second.adapter_dir, 0) == [newest]
    assert policy_lineage(base, second.adapter_dir, 5) == [newest, older, name]
    # g0, g1 sampled by the first adapter, g2 by the base model; continue from the second adapter
    policies = {"g0": older, "g1": older, "g2": name}
    rows = connect(lake).sql("SELECT * EXCLUDE (_written_at) FROM trajectories").to_arrow_table().to_pylist()
    write(lake, "trajectories", [{**r, "policy": policies[r["group_id"]]} for r in rows])
    con = connect(lake)

    def count(depth: int) -> int:
        sql = within_staleness(ALL, policy_lineage(base, second.adapter_dir, depth))
        return con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]

    assert [count(0), count(1), count(2)] == [0, 8, 12]
    with pytest.raises(SelectionError) as err:  # nothing on-policy: refused before any model is loaded
        train_grpo(
            lake,
            ALL,
            tmp_path / "no-model",
            second.adapter_dir,
            tmp_path / "c",
            config(tmp_path, max_staleness=0),
        )
    assert (
        err.value.reason == "all_stale"
        and "max_staleness" in str(err.value)
        and f"`{older}` (8)" in str(err.value)
    )
    assert not (tmp_path / "c").exists()
    third = train_grpo(
        lake,
        ALL,
        tiny_model,
        second.adapter_dir,
        tmp_path / "d",
        config(tmp_path, max_staleness=1, max_steps=1),
    )
    assert third.report["trajectories"] == 8 and third.report["stale_trajectories"] == 4


def test_batches_hold_whole_groups_in_a_seeded_order() -> None:
    groups = ["g1", "g2", "g1", "g3", "g2", "g3", "g1", "g2", "g3"]

    def sampler(batch_size: int) -> GroupedRepeatSampler:
        return GroupedRepeatSampler(
            groups,
            data_source=groups,
            mini_repeat_count=1,
            batch_size=batch_size,
            repeat_count=2,
            shuffle=True,
            seed=0,
        )

    order = list(sampler(3))
    batches = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert batches[0::2] == batches[1::2]  # each batch yielded `repeat_count` times
    assert sorted(i for b in batches[0::2] for i in b) == list(range(9))  # every row once per epoch
    assert all(len({groups[i] for i in b}) == 1 for b in batches)  # a group of 3 fills a batch of 3
    assert list(sampler(3)) == order  # seeded
    assert len(list(sampler(4))) == len(sampler(4)) == 2 * 8  # the incomplete last batch is dropped
