"""bench/train.py's data: tool-calling conversations for SFT, scored groups for GRPO."""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from store.lake import Lake
from store.messages import lake_message as message
from store.rows import utc_now
from store.writer import write
from training.chat.render import template_messages

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]


def conversation(i: int, rng: random.Random) -> list[dict[str, Any]]:
    """A tool-using arithmetic conversation of varying length."""
    a, b = rng.randrange(100), rng.randrange(100)
    filler = " ".join(
        rng.choice(["please", "quickly", "carefully", "now", "thanks"]) for _ in range(rng.randrange(2, 40))
    )
    call = {"id": f"c{i}", "name": "add", "arguments": json.dumps({"a": a, "b": b})}
    return [
        message("user", f"What is {a} + {b}? {filler}"),
        message("assistant", None, tool_calls=[call]),
        message("tool", str(a + b), name="add", tool_call_id=f"c{i}"),
        message("assistant", f"The answer is {a + b}. " + filler),
    ]


def chat_form(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return template_messages(messages)


def make_groups(args: argparse.Namespace, vocab: int, rng: random.Random) -> list[dict[str, Any]]:
    groups = []
    for g in range(args.groups):
        prompt = [
            rng.randrange(3, vocab) for _ in range(rng.randrange(args.prompt_len // 2, args.prompt_len))
        ]
        members = []
        for k in range(args.group_size):
            n = rng.randrange(args.completion_len // 2, args.completion_len)
            completion = [rng.randrange(3, vocab) for _ in range(n)]
            members.append(
                {"completion": completion, "logprobs": [-6.4] * n, "reward": float((g + k) % 3) / 2}
            )
        groups.append({"id": f"g{g:04d}", "prompt": prompt, "members": members})
    return groups


def grpo_lake(lake: Lake, groups: list[dict[str, Any]]) -> None:
    rows, rewards = [], []
    now = utc_now()
    for g in groups:
        for k, m in enumerate(g["members"]):
            tid = f"{g['id']}-{k}"
            turn = {
                "prompt_token_ids": g["prompt"],
                "completion_token_ids": m["completion"],
                "logprobs": m["logprobs"],
                "finish_reason": "stop",
            }
            rows.append(
                {
                    "trajectory_id": tid,
                    "source": "replay",
                    "started_at": now,
                    "group_id": g["id"],
                    "turns": [turn],
                }
            )
            rewards.append(
                {"trajectory_id": tid, "name": "r", "scorer": "bench", "value": m["reward"], "scored_at": now}
            )
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)


# --- the settings both sides of a comparison share ---------------------------------------------------


def cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def ours_checkpointing(kwargs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """trajlake's side of a comparison: `--activation-checkpointing` on or off, or (default) left
    to trajlake's own default for this device; stock TRL keeps it off in every row."""
    kwargs = dict(kwargs)
    choice = getattr(args, "activation_checkpointing", "default")
    if choice == "default":
        kwargs.pop("activation_checkpointing")
    else:
        kwargs["activation_checkpointing"] = choice == "on"
    return kwargs


def sft_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=1e-4,
        max_length=args.max_length,
        activation_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )


def grpo_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=1e-4,
        activation_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        max_completion_length=args.completion_len,
        mask_truncated_completions=False,
    )
