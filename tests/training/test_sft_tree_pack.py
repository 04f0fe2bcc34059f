"""SFT with tree packing: loss and LoRA gradients equal stock TRL's unpacked ones, for fewer tokens.

The batch holds what lake conversations hold: one system prompt and tool definitions shared
by all, the same question answered two ways (a shared prefix through the user's turn), a
conversation twice (its trained tokens must count twice, as unpacked), multi-turn tool use,
and rows of different lengths (right padding).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from trl import SFTTrainer

from store.metrics import TREE_PACKING_SAVED_SHARE
from tests.training.train_helpers import msg
from training.errors import BadHyperparameter
from training.lora import trainable_policy
from training.models.adapters import peft_wrapping
from training.run import load_tokenizer
from training.sft import tokenize_conversations
from training.sft_config import TrajlakeSFTConfig
from training.sft_trainer import TreePackedSFTTrainer
from training.tree_pack import IGNORE, pack_labeled_rows

SYSTEM = "You are a careful math assistant. Use the calculator for every computation, then answer."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def conversation(question: str, answer: str, *, call: str | None = None) -> dict[str, Any]:
    messages = [msg("system", SYSTEM), msg("user", question)]
    if call is not None:
        messages += [
            msg("assistant", "", tool_calls=[{"id": "c1", "name": "calculator", "arguments": call}]),
            msg("tool", answer, name="calculator", tool_call_id="c1"),
        ]
    messages.append(msg("assistant", f"The answer is {answer}."))
    return {"trajectory_id": question, "messages": messages, "tools": TOOLS}


ROWS = [
    conversation("What is 12 * 7?", "84", call='{"expression":"12 * 7"}'),
    conversation("What is 12 * 7?", "84"),  # the same question: shares the prompt, trains its own answer
    conversation("What is 12 * 7?", "84", call='{"expression":"12 * 7"}'),  # a duplicate: trained twice
    conversation("What is 3 + 4?", "7", call='{"expression":"3 + 4"}'),
    conversation("How much is 100 - 1?", "99"),
]


def config(tmp_path: Path, **kw: Any) -> TrajlakeSFTConfig:
    return TrajlakeSFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=len(ROWS),
        max_steps=1,
        learning_rate=1e-3,
        activation_checkpointing=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        lora_r=8,
        **kw,
    )


def grads(trainer: Any, batch: dict[str, torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
    trainer.model.train()
    trainer.model.zero_grad()
    tokens = int((batch["labels"][:, 1:] != IGNORE).sum())
    loss = trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=torch.tensor(tokens))
    loss.backward()
    return loss.item(), {
        name: p.grad.detach().clone() for name, p in trainer.model.named_parameters() if p.grad is not None
    }


def test_packed_loss_and_gradients_equal_stock_trl(tiny_model: Path, tmp_path: Path) -> None:
    from datasets import Dataset

    tokenizer = load_tokenizer(str(tiny_model))
    dataset = Dataset.from_dict(tokenize_conversations(ROWS, tokenizer))
    ours_config = config(tmp_path / "ours")
    model, peft_config = trainable_policy(str(tiny_model), None, ours_config, bf16=False)
    with peft_wrapping():  # as `train_sft` wraps: PEFT's probe warning is not ours to see
        ours = TreePackedSFTTrainer(
            model=model,
            args=ours_config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
        )
    with torch.no_grad():  # LoRA's B starts at zero: make every LoRA weight matter
        for name, p in ours.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    with peft_wrapping():
        stock = SFTTrainer(
            model=copy.deepcopy(ours.model),
            args=config(tmp_path / "stock", tree_packing=False),
            train_dataset=dataset,
            processing_class=tokenizer,
        )
    batch = next(iter(ours.get_train_dataloader()))
    assert batch["attention_mask"].sum(1).unique().numel() > 1  # rows of different lengths: padded

    pack = pack_labeled_rows(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert pack is not None
    trained = int((batch["labels"] != IGNORE).sum())
    assert int((pack.shift_labels != IGNORE).sum()) == trained  # every trained token is one node
    assert pack.saved_share > 0.5  # the system prompt and tools are forwarded once, not four times

    head_rows: list[
        int
    ] = []  # positions the LM head module projects (TRL's fused head reads its weight alone)
    ours.model.get_output_embeddings().register_forward_hook(
        lambda _module, args, _output: head_rows.append(args[0].shape[:-1].numel())
    )
    ours_loss, ours_grads = grads(ours, batch)
    stock_loss, stock_grads = grads(stock, batch)
    # the LM head projects the columns that hold a trained token, not the prompt's
    trained_columns = int((pack.shift_labels != IGNORE).any(dim=0).sum())
    assert head_rows == [pack.shift_labels.size(0) * trained_columns] and trained_columns < pack.nodes / 2
    assert ours.args.tree_packing and not stock.args.tree_packing
    assert ours._metrics["train"][TREE_PACKING_SAVED_SHARE] == [pytest.approx(pack.saved_share)]
    assert ours_loss == pytest.approx(stock_loss, rel=1e-5)
    assert ours_grads.keys() == stock_grads.keys() and any("lora_A" in n for n in ours_grads)
    for name, grad in ours_grads.items():
        torch.testing.assert_close(grad, stock_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # the metrics TRL logs from the loss's forward agree too
    for metric in ("entropy", "mean_token_accuracy", "num_tokens"):
        assert ours._metrics["train"][metric][-1] == pytest.approx(
            stock._metrics["train"][metric][-1], rel=1e-4
        )


def test_tree_packing_is_on_unless_packing_is() -> None:
    assert TrajlakeSFTConfig(output_dir="x").tree_packing is True
    assert TrajlakeSFTConfig(output_dir="x", packing=True).tree_packing is False

    with pytest.raises(BadHyperparameter, match="tree_packing"):
        TrajlakeSFTConfig(output_dir="x", packing=True, tree_packing=True)
