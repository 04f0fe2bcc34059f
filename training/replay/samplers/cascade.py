"""Cascade attention: every row of a batch attends one copy of the prefix they all share.

The shared-prefix decode (`shared_prefix.py`) forwards a batch's common prefix once; copying
its KV cache to each row made a decode step read that prefix once per row (at 192 rows of a
~250-token prefix, 19% of a SmolLM2 step on a CPU, most of it in the copies' memory reads).
Here the batch's cache holds only each row's own tokens (its prompt's rest and what it
sampled), and attention splits in two:

- the prefix part is one matmul for the rows that share it: their queries, stacked per KV head,
  against the prefix's keys (`[kv heads, rows x group x queries, head dim] @ [kv heads, head
  dim, prefix]`), so the prefix is read once a step;
- the row part is the usual batched matmul against each row's own keys, masked (padding,
  causality) as `sdpa` would.

Both score blocks are softmaxed together (one max and one sum over prefix and row keys), so each
row gets exactly the attention it would over `[prefix | its tokens]`, up to the rounding of
a different summation order (`tests/training/replay/samplers/test_hf.py` holds the sampled
ids and logprobs to the `generate` path's).

A batch may hold rows under several prefixes (an agent whose system prompt was edited): its
rows then lie in runs, one per prefix, and each run attends its own prefix.

It is plugged into transformers as an attention implementation (`IMPLEMENTATION`) that the
decode loop selects for its own forwards only (`selected`); the prefixes reach it as the
forward's `cascade_prefixes` keyword: each prefix's keys and values with the number of
consecutive rows that attend it. Without it is `sdpa`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
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
    cascade_cohorts: Sequence[tuple[torch.Tensor, Sequence[tuple[KV, int]]]] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of `query` ([rows, heads, queries, head dim]) over a shared prefix followed by
    each row's own `key`/`value` ([rows, kv heads, tokens, head dim]). `cascade_prefixes` lists
    each prefix's cache (batch 1, per layer) and how many rows attend it: the first so many rows
    the first prefix, the next ones the second. `attention_mask` (boolean, `sdpa`'s: [rows, 1,
    queries, tokens], or None for causal) masks the row part only. Returns [rows, queries,
    heads, head dim].

    A decode step of a batch that rows joined while it ran (`cascade_cohorts`): the rows lie in
    cohorts, each with a cache of its own width (`key` and `value` are then lists, one tensor
    per cohort: `buffered_cache.cohort_cache`), and each cohort passes its padding as an
    attention bias ([rows, tokens], 0 for a real token and -inf for padding) and its prefix
    runs; `attention_mask` is unused."""
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


def _attend_cohorts(
    module: Any,
    query: torch.Tensor,
    keys: Any,
    values: Any,
    scaling: float | None,
    cohorts: Sequence[tuple[torch.Tensor, Sequence[tuple[KV, int]]]],
) -> tuple[torch.Tensor, None]:
    """One decode step (one query a row) over rows in cohorts: each run of each cohort attends
    its prefix and its rows' own tokens (`_decode_step`)."""
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    outputs, start = [], 0
    for (bias, runs), key, value in zip(cohorts, keys, values, strict=True):
        rows = sum(n for _, n in runs)
        layer = [(prefix[module.layer_idx], n) for prefix, n in runs if n]
        outputs.append(_decode_step(query[start : start + rows], key, value, bias, layer, scale))
        start += rows
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out.transpose(1, 2).contiguous(), None


def _decode_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    runs: Sequence[tuple[tuple[torch.Tensor, torch.Tensor], int]],
    scale: float,
) -> torch.Tensor:
    """One decode step of a cohort's rows: `query` [rows, heads, 1, head dim] (unscaled), their
    own keys and values with `bias` [rows, tokens] (0, or -inf for padding), each run's prefix
    and row count; returns [rows, heads, 1, head dim].

    On a CPU each part is one call of the fused (flash) attention kernel: the rows' own tokens
    in one, each run's prefix in one (its rows' queries stacked per KV head, the prefix read
    once), the two merged by their log-sum-exps, as cascade inference merges them. `_attend`
    (elsewhere) runs ~15 ops a layer, each a pass over the scores in memory and, with several
    threads, a parallel region to start (~90 us each on 2 cores waiting passively)."""
    if not _fused(query):
        outputs, at = [], 0
        for prefix, n in runs:
            own = slice(at, at + n)
            blocked = bias[own, None, None, :] == 0  # [rows, 1, queries = 1, tokens]
            outputs.append(_attend(query[own] * scale, key[own], value[own], blocked, prefix))
            at += n
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    # head h reads KV head h // group: a row's `group` heads are its queries of that KV head
    grouped = query.reshape(rows, kv_heads, group, dim)
    own, own_lse = _flash(grouped, key, value, attn_mask=bias[:, None, None, :].to(query.dtype), scale=scale)
    out = torch.empty((rows, kv_heads, group, dim), dtype=query.dtype, device=query.device)
    at = 0
    for (prefix_k, prefix_v), n in runs:
        stacked = grouped[at : at + n].transpose(0, 1).reshape(1, kv_heads, n * group, dim)
        shared, shared_lse = _flash(stacked, prefix_k, prefix_v, scale=scale)
        shared = shared.view(kv_heads, n, group, dim).transpose(0, 1)
        # softmax over [prefix | own] = each part's softmax weighted by its share of the total mass
        weight = torch.sigmoid(shared_lse.view(kv_heads, n, group).transpose(0, 1) - own_lse[at : at + n])
        torch.lerp(own[at : at + n], shared, weight[..., None].to(out.dtype), out=out[at : at + n])
        at += n
    return out.reshape(rows, heads, 1, dim)


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
