"""TRL's fused LM head, scoring only the positions a loss reads, on a CPU too.

TRL's `add_fused_lm_head` forward (`model(..., fused_lm_head=True)`) projects hidden states
through the LM head in tiles and returns per-token log-probabilities without materialising
the logits. Where Triton runs it projects only the positions whose label is not -100; on
other devices it projects every position, so that a compiling backend (Neuron, XLA) sees one
tile shape per batch shape instead of a new one per count of labelled positions. Eager CPU
compiles nothing, and there every unlabelled position costs a vocabulary-wide matmul forward
and two backward (SmolLM2: 28M of its 135M parameters) for a number the loss never reads: in
a tree-packed SFT batch the system prompt, tool definitions and user turns, in a GRPO batch
the prompt. Both of TRL's paths zero the unlabelled positions, so the outputs are the same
(`tests/training/test_sft_tree_pack.py`, `test_tree_pack.py`).

TRL takes that decision through `trl.trainer.utils._use_triton` at each forward; the kernel
itself reads its own module's binding, so it keeps its torch tiles on a CPU.
`labelled_positions_only` answers yes for CPU tensors for the duration of one forward call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trl.trainer.utils as trl_utils


@contextmanager
def labelled_positions_only() -> Iterator[None]:
    """Within the block, TRL's fused LM head projects only labelled positions on a CPU as well
    (a TRL without the decision point is left as it is)."""
    choose = getattr(trl_utils, "_use_triton", None)
    if choose is None:
        yield
        return

    def compact(device: Any) -> bool:
        return bool(device.type == "cpu" or choose(device))

    trl_utils._use_triton = compact
    try:
        yield
    finally:
        trl_utils._use_triton = choose
