"""How stored GRPO rows become batches: which rows go together, and the tensors
`GRPOTrainer._compute_loss` reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from trl.trainer.utils import RepeatSampler, pad


def rows_as_tensors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The data collator: each row's lists (token ids, masks, logprobs) as tensors.

    accelerate moves a batch to the device by walking lists element by element, a Python
    call per token; a tensor moves in one.
    """
    return [{k: torch.tensor(v) if isinstance(v, list) else v for k, v in row.items()} for row in rows]


def padded(
    values: Sequence[Any], dtype: torch.dtype, fill: int | float, side: str, multiple: int | None
) -> torch.Tensor:
    """Ragged rows (lists or tensors) as one tensor, padded with `fill` on `side`."""
    rows = [torch.as_tensor(v, dtype=dtype) for v in values]
    # TRL annotates an int fill; it goes to `torch.full`, which takes any scalar
    return pad(rows, padding_value=fill, padding_side=side, pad_to_multiple_of=multiple)  # type: ignore[arg-type]


def pad_rows(
    rows: Sequence[dict[str, Any]], pad_id: int, multiple: int | None, mask_truncated: bool
) -> dict[str, torch.Tensor]:
    """Prompts padded on the left, completions and their per-token columns on the right;
    a truncated completion's masks zeroed when `mask_truncated`."""
    prompts = [r["prompt_ids"] for r in rows]
    completions = [r["completion_ids"] for r in rows]
    batch = {
        "prompt_ids": padded(prompts, torch.long, pad_id, "left", multiple),
        "prompt_mask": padded([[1] * len(p) for p in prompts], torch.long, 0, "left", multiple),
        "completion_ids": padded(completions, torch.long, pad_id, "right", multiple),
        "completion_mask": padded([[1] * len(c) for c in completions], torch.long, 0, "right", multiple),
        # padded with 1 as TRL pads it; the completion mask zeroes padding anyway
        "tool_mask": padded([r["tool_mask"] for r in rows], torch.long, 1, "right", multiple),
        "old_per_token_logps": padded([r["logprobs"] for r in rows], torch.float32, 0.0, "right", multiple),
        "advantages": torch.tensor([float(r["advantage"]) for r in rows], dtype=torch.float32),
    }
    if mask_truncated:
        kept = (~torch.tensor([bool(r["truncated"]) for r in rows])).unsqueeze(1).long()
        batch["completion_mask"] = batch["completion_mask"] * kept
        batch["tool_mask"] = batch["tool_mask"] * kept
    return batch


class GroupedRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` (each batch yielded `repeat_count` times, incomplete last batch
    dropped) over whole groups: the groups in a seeded random order, each group's rows
    together. A group's members share their prompt, so a batch holds few prompts and
    pads little; GRPO samplers batch the same way when they sample themselves."""

    def __init__(self, group_ids: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        members: dict[str, list[int]] = {}
        for index, group in enumerate(group_ids):
            members.setdefault(group, []).append(index)
        self.groups = list(members.values())

    def __iter__(self) -> Any:
        order = (
            torch.randperm(len(self.groups), generator=self.generator).tolist()
            if self.shuffle
            else range(len(self.groups))
        )
        indexes = [index for g in order for index in self.groups[g]]
        for start in range(0, len(indexes) - self.batch_size + 1, self.batch_size):
            chunk = indexes[start : start + self.batch_size]
            for _ in range(self.repeat_count):
                yield from chunk
