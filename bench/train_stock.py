"""The stock-TRL side of `bench/train.py`: `SFTTrainer` and `GRPOTrainer` on the same data, LoRA,
batch size and steps as trajlake's stages, with TRL's own defaults on this device unless told
otherwise (`settings`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.train_workload import TOOLS, chat_form, cuda, grpo_kwargs, sft_kwargs


def sft_stock(
    model: str,
    convs: list[list[dict[str, Any]]],
    args: argparse.Namespace,
    out: Path,
    settings: dict[str, Any],
) -> dict[str, float]:
    """Stock `SFTTrainer`; `settings` overrides (empty: TRL's own defaults on this device)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from training.sft_config import TrajlakeSFTConfig

    ours = TrajlakeSFTConfig(output_dir=str(out))
    dataset = Dataset.from_list([{"messages": chat_form(c), "tools": json.dumps(TOOLS)} for c in convs])
    device = {} if cuda() else {"use_cpu": True}  # stock TRL refuses a CPU without it
    config = SFTConfig(
        output_dir=str(out), assistant_only_loss=True, **sft_kwargs(args), **device, **settings
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, peft_config=ours.lora_config())
    metrics = trainer.train().metrics
    tokens = max(h.get("num_tokens", 0) for h in trainer.state.log_history)
    lengths = [len(x) for x in trainer.train_dataset["input_ids"]]
    return {
        "tokens": tokens,
        "seconds": metrics["train_runtime"],
        "packing": sum(lengths) / (len(lengths) * args.max_length) if config.packing else float("nan"),
        "bf16": bool(config.bf16),
        "packed": bool(config.packing),
    }


def grpo_stock(
    model: str, groups: list[dict[str, Any]], args: argparse.Namespace, out: Path, settings: dict[str, Any]
) -> dict[str, float]:
    """Stock `GRPOTrainer` on the stored groups; `settings` overrides (empty: TRL's defaults here)."""
    import os

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from training.grpo_config import TrajlakeGRPOConfig

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    by_id = {g["id"]: g for g in groups}
    rewards = {}
    for g in groups:
        for m in g["members"]:
            rewards[tuple(m["completion"])] = m["reward"]

    def rollout(prompts: list[str], trainer: Any) -> dict[str, list]:
        # The generation batch holds each group's prompt `group_size` times in a row.
        seen: dict[str, int] = {}
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for p in prompts:
            k = seen.get(p, 0) % args.group_size
            seen[p] = seen.get(p, 0) + 1
            member = by_id[p]["members"][k]
            out["prompt_ids"].append(by_id[p]["prompt"])
            out["completion_ids"].append(member["completion"])
            out["logprobs"].append(member["logprobs"])
        return out

    def stored(
        prompts: list[str], completions: list, completion_ids: list[list[int]], **kw: Any
    ) -> list[float]:
        return [rewards[tuple(ids)] for ids in completion_ids]

    ours = TrajlakeGRPOConfig(output_dir=str(out))
    device = {} if cuda() else {"use_cpu": True}
    config = GRPOConfig(
        output_dir=str(out), num_generations=args.group_size, **grpo_kwargs(args), **device, **settings
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=stored,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": [g["id"] for g in groups]}),
        peft_config=ours.lora_config(),
        rollout_func=rollout,
    )
    metrics = trainer.train().metrics
    tokens = max(h.get("num_tokens", 0) for h in trainer.state.log_history)
    return {
        "tokens": tokens,
        "seconds": metrics["train_runtime"],
        "packing": float("nan"),
        "bf16": bool(config.bf16),
        "packed": False,
    }
