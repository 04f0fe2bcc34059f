"""Tree-packed GRPO: the packed forward equals stock TRL's unpacked one, row by row.

Random groups with the shapes agent rollouts have (a shared prompt, shared first turns,
different lengths, tool-result tokens masked out, truncated rows masked whole, several
groups in one batch) go through stock `GRPOTrainer` and through
`TreePackedGRPOTrainer` with `tree_packing`: per-token logprobs, entropies, the loss of
every loss type and every LoRA gradient agree within 1e-5 in float32. A model whose
attention does not take the tree mask is forwarded unpacked, with one warning.
"""

from __future__ import annotations

import itertools
import logging
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOTrainer

from training.grpo_config import LOSS_TYPES, TrajlakeGRPOConfig
from training.grpo_trainer import stored_reward
from training.grpo_tree_trainer import TreePackedGRPOTrainer
from training.models.adapters import peft_wrapping
from training.tree_pack import IGNORE, pack_rows, sees

TOLERANCE = 1e-5


def agent_rows(seed: int, groups: int = 2, size: int = 4, vocab: int = 200) -> list[dict[str, Any]]:
    """Groups of stored rows shaped like multi-turn tool rollouts."""
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randrange(12, 40))]
        first_turn = [rng.randrange(3, vocab) for _ in range(rng.randrange(3, 8))]
        tool_result = [rng.randrange(3, vocab) for _ in range(rng.randrange(2, 5))]
        for k in range(size):
            shares_first_turn = k < size // 2  # half the group made the same first call
            own = [rng.randrange(3, vocab) for _ in range(rng.randrange(2, 14))]
            completion = (first_turn + tool_result + own) if shares_first_turn else own
            mask = [1] * len(completion)
            if shares_first_turn:
                mask[len(first_turn) : len(first_turn) + len(tool_result)] = [0] * len(tool_result)
            rows.append(
                {
                    "group_id": f"g{g}",
                    "prompt_ids": prompt,
                    "completion_ids": completion,
                    "tool_mask": mask,
                    "logprobs": [rng.uniform(-6, -0.1) if m else 0.0 for m in mask],
                    "advantage": rng.uniform(-1, 1),
                    "reward": float(k),
                    "truncated": g == 1 and k == size - 1,
                }
            )
    return rows


def config(tmp_path: Path, **kw: Any) -> TrajlakeGRPOConfig:
    return TrajlakeGRPOConfig(
        output_dir=str(tmp_path / "ckpt"),
        per_device_train_batch_size=8,
        max_steps=1,
        activation_checkpointing=False,
        save_strategy="no",
        temperature=0.7,
        disable_tqdm=True,
        seed=0,
        **kw,
    )


def trainer_on(cls: type, model: Path, cfg: TrajlakeGRPOConfig, dataset: Dataset) -> Any:
    with peft_wrapping():  # as `train_grpo` wraps: PEFT's probe warning is not ours to see
        return cls(
            model=str(model),
            reward_funcs=stored_reward,
            args=cfg,
            train_dataset=dataset,
            peft_config=cfg.lora_config(),
        )


def nontrivial_lora(*trainers: GRPOTrainer) -> None:
    """Same non-zero LoRA B in every trainer, so the adapter changes the logprobs."""
    torch.manual_seed(1)
    named = [dict(t.model.named_parameters()) for t in trainers]
    for name, param in named[0].items():
        if "lora_B" in name:
            with torch.no_grad():
                param.copy_(torch.randn_like(param) * 0.05)
                for other in named[1:]:
                    other[name].copy_(param)


@pytest.fixture(scope="module")
def pair(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("tree")
    dataset = Dataset.from_list(agent_rows(0))
    cfg = config(tmp, beta=0.05)
    ours = trainer_on(TreePackedGRPOTrainer, tiny_model, cfg, dataset)
    stock = trainer_on(GRPOTrainer, tiny_model, config(tmp, beta=0.05), dataset)
    for trainer in (ours, stock):
        trainer.current_gradient_accumulation_steps = 1
    nontrivial_lora(ours, stock)
    return ours, stock


def sequences(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return ids, mask, batch["completion_ids"].size(1)


# --- the layout ----------------------------------------------------------------------------------------


def test_a_group_shares_its_prompt_and_its_shared_turns() -> None:
    prompt = [5, 6, 7, 8]
    rows = [[*prompt, 9, 10, 11], [*prompt, 9, 10, 12], [*prompt, 13]]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    pack = pack_rows(ids, mask, 3)
    assert pack is not None
    # the prompt's first three tokens once; the last prompt token once per first completion token
    # (9 or 13); 9 shared by the first two rows, 10 copied where they score 11 vs 12; each row's
    # last token (11, 12, 13) scores nothing and is left out
    assert pack.nodes == 3 + 2 + 1 + 2
    assert pack.row_tokens == 7 + 7 + 5
    assert pack.saved_share == pytest.approx(1 - 8 / 19)
    # every scored token is read from a node of its own row's token before it, at its depth
    for r, row in enumerate(rows):
        for j in range(3):
            column = 4 + j
            node = int(pack.index[r, j])
            if column < len(row):
                assert int(pack.input_ids.flatten()[node]) == row[column - 1]
                assert int(pack.position_ids.flatten()[node]) == column - 1
                assert int(pack.shift_labels.flatten()[node]) == row[column]
            else:
                assert node == -1


@pytest.mark.parametrize("seed", range(4))
def test_each_node_sees_exactly_its_ancestors(seed: int) -> None:
    rows = agent_rows(seed, groups=3)
    width = max(len(r["prompt_ids"]) + len(r["completion_ids"]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        tokens = r["prompt_ids"] + r["completion_ids"]
        ids[i, : len(tokens)] = torch.tensor(tokens)
        mask[i, : len(tokens)] = 1
    pack = pack_rows(ids, mask, width - 12)
    assert pack is not None
    parents: dict[int, int] = {}  # from the rows: each node's predecessor on its row's path
    for r in range(len(rows)):
        path = pack.index[r][pack.index[r] >= 0].tolist()
        for a, b in itertools.pairwise(path):
            parents.setdefault(b, a)
            assert parents[b] == a  # a node has one parent
    visible = sees(pack)
    width = pack.input_ids.size(1)
    for node, parent in parents.items():  # a node sees what its parent sees, and itself
        (sequence, column), (parent_sequence, parent_column) = divmod(node, width), divmod(parent, width)
        assert sequence == parent_sequence  # a tree is never split between sequences
        expected = visible[sequence, parent_column].clone()
        expected[column] = True
        assert torch.equal(visible[sequence, column], expected)
    assert not (pack.shift_labels == IGNORE).all()


def test_small_groups_share_a_sequence_and_large_ones_get_their_own() -> None:
    rows = [[5] * 40 + [6, 7], [5] * 40 + [6, 8], [9] * 10 + [1, 2], [9] * 10 + [1, 3], [4] * 12 + [2, 2]]
    width = 42
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    pack = pack_rows(ids, mask, 2)
    assert pack is not None
    # the 40-token group fills one sequence (its width); the two small trees share the second
    assert pack.input_ids.shape == (2, 39 + 2 + 1)
    second = pack.input_ids[1].tolist()
    # pre-order: the [4 ...] tree, then the [9 ...] tree (each row's last token left out), then padding
    assert second[:25] == [4] * 12 + [2] + [9] * 10 + [1, 1]
    group = [0] * 13 + [1] * 12 + [None] * 17
    visible = sees(pack)[1]
    for q, k in torch.nonzero(visible).tolist():  # nothing sees across groups, and padding only itself
        assert k == q or (group[q] is not None and group[q] == group[k])
    assert int(visible[24].sum()) == 11  # the second 1 sees the ten 9s and itself, not the first 1


def test_rows_it_cannot_pack_are_left_to_the_unpacked_forward() -> None:
    gap = torch.tensor([[1, 0, 1, 1]])
    assert pack_rows(torch.tensor([[3, 4, 5, 6]]), gap, 2) is None  # attended tokens not contiguous
    empty_prompt = torch.tensor([[0, 0, 1, 1]])
    assert pack_rows(torch.tensor([[0, 0, 5, 6]]), empty_prompt, 2) is None  # scored from padding


# --- exactness against stock TRL -----------------------------------------------------------------------


def test_logprobs_and_entropies_equal_stock_trl(pair) -> None:  # type: ignore[no-untyped-def]
    ours, stock = pair
    ours.model.eval()
    stock.model.eval()
    for seed in range(3):
        rows = agent_rows(seed)
        batch = ours.stored_batch(rows)
        ids, mask, keep = sequences(batch)
        with torch.no_grad():
            packed = ours._get_per_token_logps_and_entropies(ours.model, ids, mask, keep, 8, True)
            unpacked = stock._get_per_token_logps_and_entropies(stock.model, ids, mask, keep, 8, True)
        scored = (batch["completion_mask"]).bool()
        assert scored.sum() > 0 and not scored.all()  # padding and a masked truncated row
        torch.testing.assert_close(packed[0], unpacked[0], rtol=0, atol=TOLERANCE)
        torch.testing.assert_close(packed[1], unpacked[1], rtol=0, atol=TOLERANCE)
        assert (packed[0][~scored] == 0).all()
    assert list(ours.__dict__["_tree_attention"].values()) == [True]  # packed, not the fallback


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_every_lora_gradient_equal_stock_trl(pair, loss_type: str) -> None:  # type: ignore[no-untyped-def]
    ours, stock = pair
    ours.model.train()
    ours.step_metrics["train"].clear()
    batch = ours._generate_and_score_completions(agent_rows(7))
    assert "ref_per_token_logps" in batch  # beta > 0: the reference pass is packed too
    results = []
    for trainer in (ours, stock):
        trainer.loss_type = loss_type
        trainer.model.train()
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, dict(batch))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        trainer.model.zero_grad()
        results.append((loss.item(), grads))
    (our_loss, our_grads), (stock_loss, stock_grads) = results
    assert our_loss == pytest.approx(stock_loss, abs=TOLERANCE)
    assert our_grads.keys() == stock_grads.keys() and len(our_grads) > 10
    for name, grad in our_grads.items():
        torch.testing.assert_close(grad, stock_grads[name], rtol=0, atol=TOLERANCE, msg=name)
    saved = ours.step_metrics["train"]["tree_packing/saved_token_share"]
    assert saved and 0.2 < saved[-1] < 1


def test_the_round_start_pass_is_packed_and_equals_unpacked(tiny_model: Path, tmp_path: Path) -> None:
    dataset = Dataset.from_list(agent_rows(3, groups=3))
    values = []
    for packing in (True, False):
        cfg = config(tmp_path, tree_packing=packing, vllm_importance_sampling_correction=True)
        trainer = trainer_on(TreePackedGRPOTrainer, tiny_model, cfg, dataset)
        nontrivial_lora(trainer)
        trainer.store_round_start_logprobs()
        values.append(trainer.train_dataset["trainer_logprobs"])
    for packed, unpacked in zip(*values, strict=True):
        torch.testing.assert_close(torch.tensor(packed), torch.tensor(unpacked), rtol=0, atol=TOLERANCE)


def test_a_batch_with_nothing_scored_trains_as_stock_does(pair) -> None:  # type: ignore[no-untyped-def]
    ours, stock = pair
    rows = [dict(r, truncated=True) for r in agent_rows(11)[:4]]  # every row truncated: masked whole
    ours.model.train()
    batch = ours._generate_and_score_completions(rows)
    assert batch["completion_mask"].sum() == 0
    losses = []
    for trainer in (ours, stock):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, dict(batch))
        loss.backward()  # a differentiable zero, as stock TRL's
        losses.append(loss.item())
    assert losses[0] == losses[1] == 0.0


# --- the fallback --------------------------------------------------------------------------------------


def test_a_model_whose_attention_ignores_the_tree_falls_back_with_one_warning(
    pair, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    ours, stock = pair
    base = ours.accelerator.unwrap_model(ours.model)
    inner = base.get_base_model().model  # the decoder stack
    original = inner.forward

    def positions_ignored(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("position_ids", None)  # as a model that numbers tokens by their column would
        return original(*args, **kwargs)

    inner.forward = positions_ignored
    ours.__dict__.pop("_tree_attention", None)
    try:
        batch = ours.stored_batch(agent_rows(5))
        ids, mask, keep = sequences(batch)
        with caplog.at_level(logging.WARNING, logger="training.grpo_tree_trainer"), torch.no_grad():
            first = ours._get_per_token_logps_and_entropies(ours.model, ids, mask, keep, 8)[0]
            again = ours._get_per_token_logps_and_entropies(ours.model, ids, mask, keep, 8)[0]
            inner.forward = original
            expected = stock._get_per_token_logps_and_entropies(stock.model, ids, mask, keep, 8)[0]
    finally:
        inner.forward = original
        ours.__dict__.pop("_tree_attention", None)
    warnings = [r for r in caplog.records if "tree_packing" in r.getMessage()]
    assert len(warnings) == 1 and "forwarded unpacked" in warnings[0].getMessage()
    torch.testing.assert_close(first, expected, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(again, expected, rtol=0, atol=TOLERANCE)


def test_an_attention_implementation_without_masks_falls_back(pair, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    ours, _ = pair
    base = ours.accelerator.unwrap_model(ours.model)
    config = base.config
    saved = config._attn_implementation
    ours.__dict__.pop("_tree_attention", None)
    try:
        config._attn_implementation = "flash_attention_2"
        with caplog.at_level(logging.WARNING, logger="training.grpo_tree_trainer"):
            assert not ours.tree_attention_ok(base)
            assert not ours.tree_attention_ok(base)
    finally:
        config._attn_implementation = saved
        ours.__dict__.pop("_tree_attention", None)
    messages = [r.getMessage() for r in caplog.records if "tree_packing" in r.getMessage()]
    assert len(messages) == 1 and "flash_attention_2" in messages[0]
