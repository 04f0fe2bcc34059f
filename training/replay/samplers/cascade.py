"""Cascade attention: every row of a batch attends one copy of the prefix they all share.

The shared-prefix decode (`shared_prefix.py`) forwards a batch's common prefix once; copying
its KV cache to each row made a decode step read that prefix once per row (at 192 rows of a
~250-token prefix, 19% of a SmolLM2 step on a CPU, most of it in the copies' memory reads).
Here the batch's cache holds only each row's own tokens, and attention splits in parts:

- the prefix part is one matmul for the rows that share it: their queries, stacked per KV head,
  against the prefix's keys (`[kv heads, rows x group x queries, head dim] @ [kv heads, head
  dim, prefix]`), so the prefix is read once a step;
- the row part is the usual batched matmul against each row's own keys, masked (padding,
  causality) as `sdpa` would.

A decode step splits the row part once more: a prompt's rest (what follows its prefix) is
cached once for the rows that sample from it (`PromptRests`), and each row's cache holds only
what it sampled. Each part's softmax is merged with the others' by their log-sum-exps (for the
prefill, both score blocks are softmaxed together), so each row gets exactly the attention it
would over `[prefix | its tokens]`, up to the rounding of a different summation order
(`tests/training/replay/samplers/test_hf.py` holds the sampled ids and logprobs to the
`generate` path's).

A batch may hold rows under several prefixes (an agent whose system prompt was edited): its
rows then lie in runs, one per prefix, and each run attends its own prefix.

It is plugged into transformers as an attention implementation (`IMPLEMENTATION`) that the
decode loop selects for its own forwards only (`selected`); the prefixes reach it as the
forward's `cascade_prefixes` keyword: each prefix's keys and values with the number of
consecutive rows that attend it. Without it is `sdpa`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

IMPLEMENTATION = "trajlake_cascade"

KV = list[tuple[Any, Any]]  # per layer: keys and values, [1, kv heads, tokens, head dim]


def cascade_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cascade_prefixes: Sequence[tuple[KV, int]] | None = None,
    cascade_cohorts: Sequence[tuple[Sequence[tuple[KV, int]], PromptRests]] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of `query` ([rows, heads, queries, head dim]) over a shared prefix followed by
    each row's own `key`/`value` ([rows, kv heads, tokens, head dim]). `cascade_prefixes` lists
    each prefix's cache (batch 1, per layer) and how many rows attend it: the first so many rows
    the first prefix, the next ones the second. `attention_mask` (boolean, `sdpa`'s: [rows, 1,
    queries, tokens], or None for causal) masks the row part only. Returns [rows, queries,
    heads, head dim].

    A decode step (`cascade_cohorts`): the rows lie in cohorts (the batch's own, and each set of
    rows that joined it while it ran), each cohort's cache holding its rows' sampled tokens
    (`key` and `value` are then lists, one tensor per cohort: `buffered_cache.cohort_cache`),
    and each cohort passes its prefix runs and its prompts' rests (`PromptRests`);
    `attention_mask` is unused."""
    if cascade_cohorts is not None:
        return _attend_cohorts(module, query, key, value, scaling, cascade_cohorts)
    if not cascade_prefixes:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    dim = query.shape[-1]
    scale = dim**-0.5 if scaling is None else scaling
    queries, tokens = query.shape[2], key.shape[2]
    if attention_mask is None and queries > 1:  # `sdpa_mask` leaves plain causality implicit
        causal = torch.ones(queries, tokens, dtype=torch.bool, device=query.device).tril(tokens - queries)
        attention_mask = causal[None, None]
    outputs, start = [], 0
    for prefix, rows in cascade_prefixes:
        if rows:
            run = slice(start, start + rows)
            outputs.append(
                _attend(
                    query[run] * scale,
                    key[run],
                    value[run],
                    attention_mask
                    if attention_mask is None or len(attention_mask) == 1
                    else attention_mask[run],
                    prefix[module.layer_idx],
                )
            )
            start += rows
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out.transpose(1, 2).contiguous(), None


@dataclass
class PromptRests:
    """A cohort's distinct prompts past their prefix (their "rests": a user's question, a
    rollout's earlier turns), cached once each, and the rows that continue each one: a decode
    step's middle level of attention, between the prefix and each row's own sampled tokens.

    A group's samples share their whole prompt: holding its rest once, not once per row, took a
    SmolLM2 step's reads of the rows' own keys and values from ~51 tokens a row to the ~20 each
    had sampled (at 384 rows, those reads were two thirds of its attention). A step stacks each
    prompt's rows' queries (`slots`, `per_prompt` a prompt, spare slots reading row 0) against
    its rest, then hands each row its slot's result (`row_slot`)."""

    layers: Sequence[Any]  # the rests' cache layers: `keys`/`values` [prompts, kv heads, tokens, head dim]
    bias: torch.Tensor  # [prompts, 1, 1, tokens]: 0 for a real token, -inf for padding
    prompt_of: list[int]  # each row's prompt; a prompt's rows are consecutive
    slots: torch.Tensor = field(init=False)  # [prompts x per_prompt]: the row each query slot reads
    row_slot: torch.Tensor = field(init=False)  # [rows]: each row's slot
    per_prompt: int = field(init=False)

    def __post_init__(self) -> None:
        if any(later < earlier for earlier, later in itertools.pairwise(self.prompt_of)):
            raise ValueError("a prompt's rows must be consecutive, in the prompts' order")
        prompts = len(self.bias)
        counts = [0] * prompts
        for prompt in self.prompt_of:
            counts[prompt] += 1
        self.per_prompt = max([1, *counts])
        first = [0] * prompts
        for prompt in range(1, prompts):
            first[prompt] = first[prompt - 1] + counts[prompt - 1]
        row_slot = [
            prompt * self.per_prompt + row - first[prompt] for row, prompt in enumerate(self.prompt_of)
        ]
        slots = [0] * (prompts * self.per_prompt)
        for row, slot in enumerate(row_slot):
            slots[slot] = row
        device = self.bias.device
        self.slots = torch.tensor(slots, device=device)
        self.row_slot = torch.tensor(row_slot, device=device)

    def keep(self, kept: Sequence[int]) -> PromptRests:
        """The rests of the rows at `kept` (in order); a prompt whose rows all left keeps its rest."""
        return PromptRests(self.layers, self.bias, [self.prompt_of[i] for i in kept])


def _attend_cohorts(
    module: Any,
    query: torch.Tensor,
    keys: Any,
    values: Any,
    scaling: float | None,
    cohorts: Sequence[tuple[Sequence[tuple[KV, int]], PromptRests]],
) -> tuple[torch.Tensor, None]:
    """One decode step (one query a row) over rows in cohorts: each row of each cohort attends
    its run's prefix, its prompt's rest and its own sampled tokens (`_decode_step`)."""
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    layer = module.layer_idx
    outputs, start = [], 0
    for (runs, rests), key, value in zip(cohorts, keys, values, strict=True):
        rows = len(rests.prompt_of)
        prefixes = [(prefix[layer], n) for prefix, n in runs if n]
        rest = rests.layers[layer]
        outputs.append(
            _decode_step(
                query[start : start + rows], key, value, (rest.keys, rest.values), rests, prefixes, scale
            )
        )
        start += rows
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out.transpose(1, 2).contiguous(), None


def _decode_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    rest: tuple[torch.Tensor, torch.Tensor],
    rests: PromptRests,
    runs: Sequence[tuple[tuple[torch.Tensor, torch.Tensor], int]],
    scale: float,
) -> torch.Tensor:
    """One decode step of a cohort's rows: `query` [rows, heads, 1, head dim] (unscaled), their
    own sampled keys and values (as many for every row: a cohort's rows decode in step), their
    prompts' rests (`rest`: this layer's keys and values, [prompts, kv heads, tokens, head dim])
    and each run's prefix with its row count; returns [rows, heads, 1, head dim].

    Each level is one attention call (`_part`) that also gives each query's log-sum-exp: the
    rows' own tokens in one, the rests in one (each prompt's rows' queries stacked per KV head),
    each run's prefix in one (its rows' queries stacked, the prefix read once); the levels are
    merged by their shares of the softmax mass, as cascade inference merges them."""
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    # head h reads KV head h // group: a row's `group` heads are its queries of that KV head
    grouped = query.reshape(rows, kv_heads, group, dim)
    out, lse = _part(grouped, key, value, None, scale)
    prompts, per = len(rests.bias), rests.per_prompt
    stacked = grouped[rests.slots].view(prompts, per, kv_heads, group, dim).transpose(1, 2)
    on_rest, rest_lse = _part(stacked.reshape(prompts, kv_heads, per * group, dim), *rest, rests.bias, scale)
    on_rest = (
        on_rest.view(prompts, kv_heads, per, group, dim).transpose(1, 2).reshape(-1, kv_heads, group, dim)
    )
    rest_lse = rest_lse.view(prompts, kv_heads, per, group).transpose(1, 2).reshape(-1, kv_heads, group)
    rest_lse = rest_lse[rests.row_slot]
    out, lse = _merge(out, lse, on_rest[rests.row_slot], rest_lse), torch.logaddexp(lse, rest_lse)
    merged, at = [], 0
    for (prefix_k, prefix_v), n in runs:
        stacked = grouped[at : at + n].transpose(0, 1).reshape(1, kv_heads, n * group, dim)
        shared, shared_lse = _part(stacked, prefix_k, prefix_v, None, scale)
        shared = shared.view(kv_heads, n, group, dim).transpose(0, 1)
        shared_lse = shared_lse.view(kv_heads, n, group).transpose(0, 1)
        merged.append(_merge(out[at : at + n], lse[at : at + n], shared, shared_lse))
        at += n
    return (merged[0] if len(merged) == 1 else torch.cat(merged)).reshape(rows, heads, 1, dim)


def _part(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of `query` [batch, kv heads, queries, dim] over `key`/`value` [batch, kv heads,
    tokens, dim] (plus an additive `bias` broadcast to the scores): the output and each query's
    log-sum-exp (natural log), what merging it with another part needs.

    On a CPU it is one call of the fused (flash) attention kernel; elsewhere a few plain ops
    (a CPU runs each of those as a pass over the scores in memory and, with several threads,
    a parallel region to start: ~90 us each on 2 cores waiting passively)."""
    if _fused(query):
        out, lse = _flash(query, key, value, attn_mask=bias, scale=scale)[:2]
        return out, lse
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    lse = scores.logsumexp(dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), value), lse


def _merge(
    first: torch.Tensor, first_lse: torch.Tensor, second: torch.Tensor, second_lse: torch.Tensor
) -> torch.Tensor:
    """Attention over two parts' keys from each part's own (`[..., dim]`, log-sum-exps `[...]`):
    each weighted by its share of the total softmax mass (whose log-sum-exp is `logaddexp` of
    the two)."""
    weight = torch.sigmoid(second_lse - first_lse)
    return torch.lerp(first, second, weight[..., None].to(first.dtype))


def _fused(query: torch.Tensor) -> bool:
    """Whether a decode step runs on the CPU's fused attention kernel: its tensors are on a CPU."""
    return query.device.type == "cpu"


#: The CPU's fused attention (`sdpa`'s flash kernel), which also returns each query's log-sum-exp.
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    prefix_kv: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """One run of rows over one prefix: `query` already scaled; returns [rows, heads, queries, dim]."""
    prefix_k, prefix_v = prefix_kv
    rows, heads, queries, dim = query.shape
    kv_heads, tokens, prefix = key.shape[1], key.shape[2], prefix_k.shape[2]
    group = heads // kv_heads
    # Head h reads KV head h // group (transformers' `repeat_kv`): [rows, kv heads, group x queries, dim].
    q = query.reshape(rows, kv_heads, group * queries, dim)
    stacked = q.transpose(0, 1).reshape(kv_heads, rows * group * queries, dim)
    on_prefix = torch.bmm(stacked, prefix_k[0].transpose(1, 2))  # [kv heads, rows x gq, prefix]
    on_prefix = on_prefix.view(kv_heads, rows, group * queries, prefix).transpose(0, 1)
    on_rows = torch.matmul(q, key.transpose(2, 3))  # [rows, kv heads, gq, tokens]
    if attention_mask is not None:
        blocked = ~attention_mask.reshape(len(attention_mask), 1, 1, queries, tokens)
        on_rows = on_rows.view(rows, kv_heads, group, queries, tokens).masked_fill(blocked, float("-inf"))
        on_rows = on_rows.view(rows, kv_heads, group * queries, tokens)
    scores = torch.cat([on_prefix, on_rows], dim=-1).softmax(dim=-1)
    weights_prefix = scores[..., :prefix].transpose(0, 1).reshape(kv_heads, rows * group * queries, prefix)
    out = torch.bmm(weights_prefix, prefix_v[0]).view(kv_heads, rows, group * queries, dim).transpose(0, 1)
    out = out + torch.matmul(scores[..., prefix:], value)  # [rows, kv heads, gq, dim]
    return out.reshape(rows, heads, queries, dim)


AttentionInterface.register(IMPLEMENTATION, cascade_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, sdpa_mask)


def cascades(model: Any) -> bool:
    """Whether the shared-prefix decode attends shared prefixes by cascade on `model`: it
    attends with `sdpa` and every layer of its cache is full attention (no sliding window)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return replaces(model) and all(
        type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers
    )


def replaces(model: Any) -> bool:
    """Whether `model` attends with `sdpa`, the implementation the cascade stands in for."""
    return model.config._attn_implementation in ("sdpa", IMPLEMENTATION)


@contextlib.contextmanager
def selected(model: Any) -> Iterator[None]:
    """Runs `model` (or its PEFT wrapper: one config) with cascade attention for the duration
    (`replaces(model)` must hold); the caller holds the sampler's lock, so no other forward
    sees the switch."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = IMPLEMENTATION
    try:
        yield
    finally:
        config._attn_implementation = before
