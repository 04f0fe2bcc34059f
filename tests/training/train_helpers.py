"""Row builders for the training tests (trajectories, rewards, scenarios written into a test lake)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from store.rows import utc_now
from training.datasets import select_grpo
from training.models.adapters import peft_wrapping


def msg(role: str, content: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "name": kw.get("name"),
        "tool_call_id": kw.get("tool_call_id"),
        "tool_calls": kw.get("tool_calls") or [],
        "is_error": kw.get("is_error"),
    }


def turn(
    prompt: list[int], completion: list[int], logprobs: list[float] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "logprobs": logprobs if logprobs is not None else [-1.0] * len(completion),
        "finish_reason": finish,
    }


def traj(
    tid: str,
    *,
    group_id: str | None = None,
    scenario_id: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    turns: list[dict[str, Any]] | None = None,
    tools: str | None = None,
    source: str = "replay",
    offset_s: int = 0,
    metadata: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    started = utc_now() - timedelta(seconds=offset_s)
    return {
        "trajectory_id": tid,
        "source": source,
        "started_at": started,
        "ended_at": started,
        "messages": messages
        or [msg("user", f"What is 2 + {len(tid)}?"), msg("assistant", f"The answer is {2 + len(tid)}.")],
        "tools": tools,
        "scenario_id": scenario_id,
        "group_id": group_id,
        "turns": turns or [],
        "metadata": json.dumps(metadata) if metadata is not None else None,
        "sampling": sampling,  # `store.schema.SAMPLING`; fields left out are null
    }


def reward(
    tid: str,
    value: float | None,
    *,
    name: str = "correct",
    group_id: str | None = None,
    scorer: str = "tests.reward@1",
    status: str = "ok",
) -> dict[str, Any]:
    return {
        "trajectory_id": tid,
        "name": name,
        "scorer": scorer,
        "value": value,
        "group_id": group_id,
        "scored_at": utc_now(),
        "status": status,
    }


def model_logprobs(
    model_path: str, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """Logprob of each completion token under the base model at `temperature` (what a sampler would store)."""
    import torch

    model = _cached_model(model_path)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    logps = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1)
    return logps.tolist()


_MODELS: dict[str, object] = {}


def _cached_model(model_path: str):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    if model_path not in _MODELS:
        _MODELS[model_path] = AutoModelForCausalLM.from_pretrained(model_path).eval()
    return _MODELS[model_path]


def stored_groups(
    model_path: str,
    *,
    groups: int = 3,
    size: int = 4,
    seed: int = 0,
    temperature: float = 1.0,
    multi_turn: bool = True,
    vocab: int = 500,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Scored groups with token data whose logprobs are the base model's own (an on-policy sample).

    Multi-turn rows have a tool-result glue between the two sampled turns.
    """
    import random

    rng = random.Random(seed)
    rows, rewards = [], []
    for g in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(6 + g)]
        for k in range(size):
            tid = f"g{g}-{k}"
            first = [rng.randrange(3, vocab) for _ in range(3 + k)]
            turns = [
                turn(prompt, first, model_logprobs(model_path, prompt, first, temperature), "tool_calls")
            ]
            if multi_turn:
                history = prompt + first + [rng.randrange(3, vocab) for _ in range(4)]
                second = [rng.randrange(3, vocab) for _ in range(2 + (k % 2))]
                turns.append(turn(history, second, model_logprobs(model_path, history, second, temperature)))
            # recorded as a replay records it: GRPO divides by the temperature the groups were sampled at
            sampling = {"temperature": temperature}
            rows.append(traj(tid, group_id=f"g{g}", scenario_id=f"s{g}", turns=turns, sampling=sampling))
            rewards.append(reward(tid, float((k + g) % 3) / 2, group_id=f"g{g}"))
    return rows, rewards


# --- parity with stock TRL (the tiny model's tests and the real model's share it) ------------------


def grpo_test_config(tmp: Path, **overrides: Any) -> Any:
    """A small, quiet GRPO config for tests: 2 steps of 4 rows, no checkpoints, no tqdm."""
    from training.grpo_config import TrajlakeGRPOConfig

    settings: dict[str, Any] = dict(
        output_dir=str(tmp / "ckpt"),
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=5e-3,
        activation_checkpointing=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    return TrajlakeGRPOConfig(**{**settings, **overrides})


def parity_trainers(lake: Any, model: str, tmp: Path, temperature: float) -> tuple[Any, Any, Any]:
    """trajlake's GRPO trainer and stock TRL's on the same stored groups, config and LoRA weights.

    Same LoRA init (TRL seeds before wrapping), but the adapters are made non-trivial and
    identical, so the ratio, clipping and KL terms all matter.
    """
    import torch
    from trl import GRPOTrainer

    from training.grpo import grpo_dataset, grpo_trainer_class, stored_reward

    selection = select_grpo(lake, "SELECT trajectory_id FROM trajectories")
    dataset = grpo_dataset(selection.examples)
    assert selection.temperature == temperature  # as the groups recorded it; `train_grpo` uses it so
    cfg = grpo_test_config(tmp, beta=0.05, temperature=selection.temperature)
    lora = cfg.lora_config()
    with peft_wrapping():  # as `train_grpo` wraps: PEFT's probe warning is not ours to see
        ours = grpo_trainer_class(cfg)(
            model=model, reward_funcs=stored_reward, args=cfg, train_dataset=dataset, peft_config=lora
        )
        stock = GRPOTrainer(
            model=model, reward_funcs=stored_reward, args=cfg, train_dataset=dataset, peft_config=lora
        )
    for trainer in (ours, stock):
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these calls bypass
    torch.manual_seed(1)
    for (n1, p1), (n2, p2) in zip(ours.model.named_parameters(), stock.model.named_parameters(), strict=True):
        assert n1 == n2
        if "lora_B" in n1:
            with torch.no_grad():
                p1.copy_(torch.randn_like(p1) * 0.05)
                p2.copy_(p1)
    return ours, stock, dataset


def loss_and_grads(
    trainer: Any, batch: dict, loss_type: str, backward: bool = True
) -> tuple[float, dict[str, Any]]:
    trainer.loss_type = loss_type
    trainer.model.train()
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    if not backward:  # adapters disabled: nothing trainable to differentiate
        return loss.item(), {}
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad()
    return loss.item(), grads


def check_parity_with_stock(
    ours: Any, stock: Any, dataset: Any, loss_type: str, *, rtol: float = 1e-5
) -> None:
    """One batch of stored groups through both trainers: the same loss and gradients (to `rtol`:
    float32 summation order differs between the two forwards, more so over a real model's 30
    layers and on AMD, whose kernels round differently: on a 2-core AMD EPYC (Zen 4) the tiny
    model's losses differed by 1.1e-6 relative and SmolLM2's by 1.3e-5, on Intel within 1e-6
    and 1e-5); and the stored logprobs line up token by token with the model's own (stock TRL's
    on-policy path)."""
    import math

    import pytest

    rows = [dataset[i] for i in range(4)]
    ours.model.train()
    batch = ours._generate_and_score_completions(rows)
    assert set(batch) >= {
        "prompt_ids",
        "completion_ids",
        "tool_mask",
        "advantages",
        "old_per_token_logps",
        "ref_per_token_logps",
    }

    # 1. Same tensors through both trainers' loss: identical loss and gradients.
    our_loss, our_grads = loss_and_grads(ours, batch, loss_type)
    stock_loss, stock_grads = loss_and_grads(stock, dict(batch), loss_type)
    assert math.isfinite(our_loss)
    assert our_loss == pytest.approx(stock_loss, rel=rtol, abs=1e-7), (our_loss, stock_loss)
    assert our_grads.keys() == stock_grads.keys() and our_grads
    for name, grad in our_grads.items():
        expected = stock_grads[name]
        error = ((grad - expected).norm() / expected.norm()).item()
        assert error <= 10 * rtol, f"{name}: relative error {error:.2e}"

    # 2. Stored logprobs are the sampler's (here: the base model at the sampling temperature).
    # With adapters disabled, stock TRL's on-policy path (no old logps: ratio exactly 1) must give
    # the loss our batch gives through the stored logprobs, which proves they line up token by token.
    on_policy = {k: v for k, v in batch.items() if k != "old_per_token_logps"}
    with ours.model.disable_adapter():
        ours_base, _ = loss_and_grads(ours, batch, loss_type, backward=False)
    with stock.model.disable_adapter():
        stock_base, _ = loss_and_grads(stock, on_policy, loss_type, backward=False)
    assert ours_base == pytest.approx(stock_base, rel=1e-4, abs=1e-5)
