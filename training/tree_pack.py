"""Tree packing: the rows of a batch forwarded once as a prefix tree over their token ids.

A GRPO group's rows repeat one prompt (system prompt, tool definitions, the conversation
so far) and multi-turn samples often share their first turns too; stock TRL forwards every
row whole. Here each batch of padded rows becomes one sequence of tree nodes: a node is a
token at a depth, shared by every row whose tokens up to and including it agree *and* who
score the same next token from it (a node's logits are scored against one label, so two
rows that diverge at the next scored token keep their own copy of the branch point; the
cost is one token per branch), and tokens whose logits nothing reads (each row's last,
a masked row's every token) are left out. Rows are sorted by their (token, label) sequences first, so
the nodes come out in depth-first pre-order: a node's subtree is the contiguous range
`[node, subtree_end[node]]`, and "a token sees exactly its own ancestors" is two
comparisons per (query, key) pair, for a dense SDPA mask or a FlexAttention `BlockMask`.
Each node keeps its depth as its position id, the position it has in its own row. The
trees of a batch are laid out in sequences of the largest tree's width (small groups share
one, block-diagonal; large ones get their own), so no attention is spent between groups
that a sequence of their own would not spend.

Per-row semantics are restored by `index`: the node whose logits score each row's
completion token, or -1 where stock TRL scores nothing (padding, masked rows). Gathering
the packed log-probabilities through it gives TRL's `(rows, logits_to_keep)` tensor, and
gradients of shared nodes add up over the rows that read them, which is what the unpacked
forward computes. Pure functions of tensors; the trainer decides when to use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

IGNORE = -100  # TRL's and transformers' "no label"
# Attention implementations that take a ready 4D mask (or FlexAttention's BlockMask) as given.
TREE_ATTENTION = frozenset({"sdpa", "eager", "flex_attention"})


@dataclass(frozen=True)
class TreePack:
    """A batch of padded rows as prefix trees, laid out in `sequences` of equal width."""

    input_ids: torch.Tensor  # (sequences, width) token of each node; padding after the nodes
    position_ids: torch.Tensor  # (sequences, width) depth of each node: its position in its own row
    shift_labels: torch.Tensor  # (sequences, width) the token each node's logits are scored against, or -100
    subtree_end: (
        torch.Tensor
    )  # (sequences, width) last node of each node's subtree (pre-order, in its sequence)
    index: (
        torch.Tensor
    )  # (rows, logits_to_keep) flat node (sequence * width + column) scoring each token; -1: none
    nodes: int  # tree nodes (padding not counted)
    row_tokens: int  # tokens the rows hold unpacked (padding not counted)

    @property
    def saved_share(self) -> float:
        """Share of the rows' tokens the packed forward does not compute."""
        return 1.0 - self.nodes / self.row_tokens if self.row_tokens else 0.0


def pack_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, multiple: int = 1
) -> TreePack | None:
    """Pack TRL's padded rows (prompt padded left, completion right) into a prefix tree.

    Scores exactly what `GRPOTrainer._get_per_token_logps_and_entropies` scores: the token
    in column `c` of the last `logits_to_keep` columns, where attended, from the logits of
    column `c - 1`. None when the rows do not have that shape (a row's attended tokens not
    contiguous, or a scored token with no attended token before it): the caller forwards
    them unpacked. The sequences' width is rounded up to `multiple` (on a GPU, so kernels
    tuned or compiled for a shape see few distinct shapes).
    """
    width = input_ids.size(1)
    first_scored = width - logits_to_keep
    mask = attention_mask.bool().tolist()
    scored = [[first_scored <= c and keep for c, keep in enumerate(row)] for row in mask]
    return _pack(input_ids, mask, scored, first_scored, own_scored=False, multiple=multiple)


def pack_labeled_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, multiple: int = 1
) -> TreePack | None:
    """Pack SFT's rows (right-padded; `labels` the unshifted targets, -100 where nothing is
    trained) into a prefix tree: what a batch's conversations share before their first trained
    token (the system prompt, the tool definitions, a repeated question) is forwarded once.

    A scored node is never shared: each row keeps its own copy from its first trained token
    on, so every trained token of every row is exactly one node and the sum of the nodes'
    losses is the unpacked rows' sum (two identical conversations are trained on twice, as
    unpacked). `index` maps each row's columns to their nodes, as `pack_rows`' does.
    """
    mask = attention_mask.bool().tolist()
    scored = (labels != IGNORE).tolist()
    return _pack(input_ids, mask, scored, 0, own_scored=True, multiple=multiple)


def _pack(
    input_ids: torch.Tensor,
    attended: list[list[bool]],
    scored: list[list[bool]],
    first_scored: int,
    *,
    own_scored: bool,
    multiple: int,
) -> TreePack | None:
    """The tree of the rows: a token of column `c` scores column `c + 1` where `scored` says so.

    Rows whose attended tokens are not contiguous, or whose first scored token has no
    attended token before it, cannot be packed (None). With `own_scored` a scored node
    belongs to its row alone (SFT's per-token loss); otherwise rows share every node whose
    path of (token, label) agrees (GRPO's per-row logprobs are gathered through `index`).
    """
    width = input_ids.size(1)
    logits_to_keep = width - first_scored
    ids = input_ids.tolist()
    sequences: list[list[tuple[int, int, int]]] = []  # per row: (token, label, owner) of each attended column
    starts: list[int] = []
    row_tokens = 0
    for r, (row, mask, score) in enumerate(zip(ids, attended, scored, strict=True)):
        columns = [c for c, keep in enumerate(mask) if keep]
        if columns and columns[-1] - columns[0] + 1 != len(columns):
            return None
        start = columns[0] if columns else width
        if first_scored <= start < width and start > 0 and score[start]:
            return None  # TRL would score this token from a padding column's logits
        sequence = []
        for c in columns:
            is_scored = c + 1 < width and mask[c + 1] and score[c + 1]
            label = row[c + 1] if is_scored else IGNORE
            sequence.append((row[c], label, r if own_scored and is_scored else -1))
        while sequence and sequence[-1][1] == IGNORE:  # read by nothing: no label, no descendant
            sequence.pop()
        sequences.append(sequence)
        starts.append(start)
        row_tokens += len(columns)

    order = sorted(range(len(ids)), key=sequences.__getitem__)
    tokens: list[int] = []
    depths: list[int] = []
    labels: list[int] = []
    subtree_end: list[int] = []
    index = [[-1] * logits_to_keep for _ in range(len(ids))]
    path: list[int] = []  # the previous row's nodes, by depth
    previous: list[tuple[int, int, int]] = []
    for r in order:
        sequence = sequences[r]
        shared = 0  # sorted rows: the longest prefix any earlier row shares is the previous row's
        for a, b in zip(sequence, previous, strict=False):
            if a != b:
                break
            shared += 1
        path = path[:shared]
        for depth in range(shared, len(sequence)):
            path.append(len(tokens))
            tokens.append(sequence[depth][0])
            labels.append(sequence[depth][1])
            depths.append(depth)
            subtree_end.append(0)
        for node in path:  # later rows through a node end later: the last write is the subtree's end
            subtree_end[node] = path[-1]
        column0 = starts[r]
        for depth, node in enumerate(path):
            if labels[node] != IGNORE:
                index[r][column0 + depth + 1 - first_scored] = node
        previous = sequence

    return laid_out(tokens, depths, labels, subtree_end, index, row_tokens, input_ids.device, multiple)


def laid_out(
    tokens: list[int],
    depths: list[int],
    labels: list[int],
    subtree_end: list[int],
    index: list[list[int]],
    row_tokens: int,
    device: torch.device,
    multiple: int = 1,
) -> TreePack:
    """Pre-order nodes -> sequences: each root's tree whole in one sequence, trees placed
    largest first into the first sequence with room, the width that of the largest tree.
    Groups of a batch thus share a sequence when small (block-diagonal) and get their own
    when large, so attention costs the sum of squares of the sequences, not of the batch."""
    roots = []
    node = 0
    while node < len(tokens):
        roots.append((node, subtree_end[node] + 1))
        node = subtree_end[node] + 1
    width = max((end - start for start, end in roots), default=1)
    width = -(-width // multiple) * multiple
    bins: list[list[tuple[int, int]]] = []
    room: list[int] = []
    for start, end in sorted(roots, key=lambda r: r[0] - r[1]):
        size = end - start
        fit = next((b for b, free in enumerate(room) if free >= size), None)
        if fit is None:
            bins.append([])
            room.append(width)
            fit = len(bins) - 1
        bins[fit].append((start, end))
        room[fit] -= size
    place = [0] * len(tokens)  # flat position of each node
    columns: list[list[int]] = []  # per sequence: the nodes in column order
    for b, trees in enumerate(bins):
        order = [n for start, end in sorted(trees) for n in range(start, end)]
        for column, n in enumerate(order):
            place[n] = b * width + column
        columns.append(order)
    ids = torch.zeros(len(bins), width, dtype=torch.long)
    positions = torch.zeros_like(ids)
    shift_labels = torch.full_like(ids, IGNORE)
    ends = torch.arange(width).repeat(len(bins), 1)  # padding sees itself only
    for b, order in enumerate(columns):
        n = len(order)
        ids[b, :n] = torch.tensor([tokens[i] for i in order])
        positions[b, :n] = torch.tensor([depths[i] for i in order])
        shift_labels[b, :n] = torch.tensor([labels[i] for i in order])
        ends[b, :n] = torch.tensor([place[subtree_end[i]] - b * width for i in order])
    flat = torch.tensor([[place[i] if i >= 0 else -1 for i in row] for row in index], dtype=torch.long)
    return TreePack(
        input_ids=ids.to(device),
        position_ids=positions.to(device),
        shift_labels=shift_labels.to(device),
        subtree_end=ends.to(device),
        index=flat.reshape(len(index), -1).to(device),
        nodes=len(tokens),
        row_tokens=row_tokens,
    )


def sees(pack: TreePack) -> torch.Tensor:
    """(sequences, width, width) bool: query q sees key k iff k is q or one of its ancestors."""
    columns = torch.arange(pack.subtree_end.size(1), device=pack.subtree_end.device)
    query, key = columns[None, :, None], columns[None, None, :]
    return (key <= query) & (query <= pack.subtree_end[:, None, :])


def attention_mask_for(pack: TreePack, implementation: str) -> Any:
    """The mask transformers' attention takes as given: a `BlockMask` for FlexAttention, a
    boolean (sequences, 1, width, width) mask for SDPA, an additive float one for eager."""
    if implementation == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        end = pack.subtree_end

        def ancestor(batch: Any, head: Any, query: Any, key: Any) -> Any:
            return (key <= query) & (query <= end[batch, key])

        sequences, width = end.shape
        return create_block_mask(ancestor, B=sequences, H=None, Q_LEN=width, KV_LEN=width, device=end.device)
    visible = sees(pack)[:, None]
    if implementation == "sdpa":
        return visible
    return torch.zeros(visible.shape, device=visible.device).masked_fill_(
        ~visible, torch.finfo(torch.float32).min
    )


def unpack(per_node: torch.Tensor, pack: TreePack) -> torch.Tensor:
    """(sequences, width) per-node values -> (rows, logits_to_keep) per row, 0 where nothing is scored."""
    values = per_node.reshape(-1)[pack.index.clamp(min=0)]
    return values.masked_fill(pack.index < 0, 0.0)
