"""Cascade attention: one copy of the shared prefix attended by every row gives what attention over
each row's own copy of `[prefix | its tokens]` gives."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from training.replay.samplers import decode_loop, make_sampler, shared_prefix
from training.replay.samplers.base import SampleRequest, SamplingParams
from training.replay.samplers.cascade import PromptRests, cascade_attention


def _reference(query: Any, prefix_k: Any, prefix_v: Any, key: Any, value: Any, allowed: Any) -> Any:
    """Plain attention over every row's copy of the prefix and its own keys, GQA expanded."""
    rows, heads = query.shape[:2]
    group = heads // key.shape[1]
    k = torch.cat([prefix_k.expand(rows, -1, -1, -1), key], dim=2).repeat_interleave(group, dim=1)
    v = torch.cat([prefix_v.expand(rows, -1, -1, -1), value], dim=2).repeat_interleave(group, dim=1)
    full = torch.cat([torch.ones(*allowed.shape[:-1], prefix_k.shape[2], dtype=torch.bool), allowed], dim=-1)
    out = torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=full)
    return out.transpose(1, 2)


@pytest.mark.parametrize("queries", [1, 5])
def test_cascade_equals_attention_over_each_rows_copy(queries: int) -> None:
    g = torch.Generator().manual_seed(0)
    rows, kv_heads, group, dim, prefix, tokens = 4, 2, 3, 8, 11, 7
    query = torch.randn(rows, kv_heads * group, queries, dim, generator=g)
    key, value = (torch.randn(rows, kv_heads, tokens, dim, generator=g) for _ in range(2))
    prefix_k, prefix_v = (torch.randn(1, kv_heads, prefix, dim, generator=g) for _ in range(2))
    # Left padding of 0-3 columns per row, causal over the last `queries` columns (sdpa_mask's shape).
    allowed = torch.ones(rows, 1, queries, tokens, dtype=torch.bool).tril(tokens - queries)
    for r in range(rows):
        allowed[r, :, :, :r] = False
    module = SimpleNamespace(layer_idx=1, num_key_value_groups=group, is_causal=True)
    other = (torch.zeros_like(prefix_k), torch.zeros_like(prefix_v))
    out, _ = cascade_attention(
        module,
        query,
        key,
        value,
        allowed,
        scaling=dim**-0.5,
        cascade_prefixes=[([other, (prefix_k, prefix_v)], rows)],
    )
    assert out.shape == (rows, queries, kv_heads * group, dim)
    expected = _reference(query, prefix_k, prefix_v, key, value, allowed)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if queries > 1:  # no mask means plain causality over the row's tokens, as in `sdpa`
        causal, _ = cascade_attention(
            module,
            query,
            key,
            value,
            None,
            scaling=dim**-0.5,
            cascade_prefixes=[([other, (prefix_k, prefix_v)], rows)],
        )
        no_padding = torch.ones_like(allowed).tril(tokens - queries)
        torch.testing.assert_close(
            causal, _reference(query, prefix_k, prefix_v, key, value, no_padding), atol=1e-5, rtol=1e-5
        )


def test_each_run_of_rows_attends_its_own_prefix() -> None:
    """Rows under two system prompts in one batch: the first run attends one prefix, the rest
    another of another length, each as if alone."""
    g = torch.Generator().manual_seed(2)
    rows, kv_heads, group, dim, tokens = 5, 2, 3, 8, 7
    query = torch.randn(rows, kv_heads * group, 1, dim, generator=g)
    key, value = (torch.randn(rows, kv_heads, tokens, dim, generator=g) for _ in range(2))
    first = tuple(torch.randn(1, kv_heads, 11, dim, generator=g) for _ in range(2))
    second = tuple(torch.randn(1, kv_heads, 4, dim, generator=g) for _ in range(2))
    allowed = torch.ones(rows, 1, 1, tokens, dtype=torch.bool)
    for r in range(rows):
        allowed[r, :, :, :r] = False
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=group, is_causal=True)
    out, _ = cascade_attention(
        module, query, key, value, allowed, scaling=dim**-0.5, cascade_prefixes=[([first], 2), ([second], 3)]
    )
    for run, (k, v) in ((slice(0, 2), first), (slice(2, 5), second)):
        expected = _reference(query[run], k, v, key[run], value[run], allowed[run])
        torch.testing.assert_close(out[run], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_a_decode_step_over_cohorts_attends_each_rows_prefix_prompt_and_tokens(
    fused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode step over two cohorts: each row attends its run's prefix, its prompt's rest (held
    once per prompt, left-padded to the cohort's longest) and what it sampled. Prompts hold
    different numbers of rows (one none: its rows all left), and the second cohort's first run
    has no rows left; by the CPU's fused kernel and by the device-generic ops alike."""
    from training.replay.samplers import cascade

    monkeypatch.setattr(cascade, "_fused", lambda query: fused)
    g = torch.Generator().manual_seed(3)
    kv_heads, group, dim = 2, 3, 8
    first = tuple(torch.randn(1, kv_heads, 11, dim, generator=g) for _ in range(2))
    second = tuple(torch.randn(1, kv_heads, 4, dim, generator=g) for _ in range(2))
    # (rests' width, tokens sampled, runs, each row's prompt, each prompt's rest length)
    shapes = [
        (6, 3, [(first, 3), (second, 3)], [0, 0, 2, 3, 3, 3], [6, 4, 5, 2]),
        (5, 2, [(first, 0), (second, 3)], [0, 1, 1], [5, 3]),
    ]
    rows = sum(len(prompt_of) for _, _, _, prompt_of, _ in shapes)
    query = torch.randn(rows, kv_heads * group, 1, dim, generator=g)
    keys, values, cohorts, expected = [], [], [], []
    start = 0
    for width, sampled, runs, prompt_of, lengths in shapes:
        rest_k, rest_v = (torch.randn(len(lengths), kv_heads, width, dim, generator=g) for _ in range(2))
        padding = torch.tensor([[t < width - n for t in range(width)] for n in lengths])
        bias = torch.zeros(len(lengths), 1, 1, width).masked_fill(padding[:, None, None], float("-inf"))
        key, value = (torch.randn(len(prompt_of), kv_heads, sampled, dim, generator=g) for _ in range(2))
        keys.append(key)
        values.append(value)
        rests = PromptRests([SimpleNamespace(keys=rest_k, values=rest_v)], bias, prompt_of)
        cohorts.append(([([kv], n) for kv, n in runs], rests))
        at = 0
        for (k, v), n in runs:
            for row in range(at, at + n):
                p, real = prompt_of[row], slice(width - lengths[prompt_of[row]], width)
                own_k = torch.cat([rest_k[p : p + 1, :, real], key[row : row + 1]], dim=2)
                own_v = torch.cat([rest_v[p : p + 1, :, real], value[row : row + 1]], dim=2)
                everything = torch.ones(1, 1, 1, own_k.shape[2], dtype=torch.bool)
                expected.append(
                    _reference(query[start + row : start + row + 1], k, v, own_k, own_v, everything)
                )
            at += n
        start += len(prompt_of)
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=group, is_causal=True)
    out, _ = cascade_attention(module, query, keys, values, None, scaling=dim**-0.5, cascade_cohorts=cohorts)
    assert out.shape == (rows, 1, kv_heads * group, dim)
    torch.testing.assert_close(out, torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_prompt_rests_stack_each_prompts_rows_and_follow_the_rows_that_stay() -> None:
    rests = PromptRests([], torch.zeros(3, 1, 1, 2), [0, 0, 2])
    assert rests.per_prompt == 2
    assert rests.row_slot.tolist() == [0, 1, 4]  # prompt 1 has no rows: its slots are spare
    assert rests.slots.tolist() == [0, 1, 0, 0, 2, 0]
    kept = rests.keep([1, 2])
    assert (kept.per_prompt, kept.row_slot.tolist(), kept.slots.tolist()) == (1, [0, 2], [0, 0, 1])
    with pytest.raises(ValueError, match="consecutive"):
        PromptRests([], torch.zeros(2, 1, 1, 2), [1, 0])


def test_without_a_prefix_it_is_sdpa() -> None:
    g = torch.Generator().manual_seed(1)
    query = torch.randn(2, 4, 1, 8, generator=g)
    key, value = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(2))
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=2, is_causal=True)
    out, _ = cascade_attention(module, query, key, value, None, scaling=8**-0.5)
    empty = torch.zeros(1, 2, 0, 8)
    expected = _reference(query, empty, empty, key, value, torch.ones(2, 1, 1, 5, dtype=torch.bool))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_the_batch_cache_holds_each_rows_own_tokens_only(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows' KV cache is sized for what they sample, each prompt's rest is cached once beside
    it, never the shared prefix, and the sampler still samples what `generate` samples."""
    capacities: list[int] = []
    build = decode_loop.preallocated_cache

    def recording(config: Any, capacity: int) -> Any:
        capacities.append(capacity)
        return build(config, capacity)

    monkeypatch.setattr(decode_loop, "preallocated_cache", recording)
    sampler = make_sampler("transformers", str(tiny_model))
    plain = make_sampler("transformers", str(tiny_model), shared_prefix=False)
    tok = sampler.tokenizer
    system = "<|im_start|>system\nYou are a careful math assistant. Use the calculator tool.<|im_end|>\n"
    prompts = [
        tuple(tok.encode(f"{system}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"))
        for q in ("What is 12 * 7?", "Hi")
    ]
    params = SamplingParams(max_tokens=6, temperature=0.9, seed=3)
    requests = [SampleRequest(p, 2, params) for p in prompts]
    got, want = sampler.generate(requests), plain.generate(requests)
    for group_a, group_b in zip(got, want, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert x.token_ids == y.token_ids
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
    shared = shared_prefix.common_prefix(prompts)
    assert shared >= shared_prefix.MIN_SHARED
    assert capacities[-2:] == [max(len(p) for p in prompts) - shared, params.max_tokens]
