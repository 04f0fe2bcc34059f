"""The transformers backend's decode loop: what a batch's rows share is forwarded once.

A replay round's prompts all begin with the same system prompt and tool definitions (~200
SmolLM2 tokens of a ~230-token first turn), a group's `n` rows repeat one prompt, and a later
turn's prompt extends the earlier one. `generate` forwards every row's whole prompt; here

- the rows are grouped by the prefix their prompts share (`prefix_groups`: a batch may mix
  system prompts), and each group's longest shared prefix is forwarded once, at batch 1, its KV
  cache kept (`PrefixStore`, keyed by the adapter and the prefix's token ids) for the next
  batches of the round: later turns, the other chunks, the next evaluation; the groups then
  decode in one batch, each run of rows attending its own prefix (`cascade.py`);
- each distinct prompt's rest is forwarded once, beside the shared prefix's cache, and its
  own cache is then copied to that prompt's rows; the shared prefix's cache is never copied:
  every row attends its one copy (`cascade.py`), unless a layer is not full attention;
- decoding feeds one token per unfinished row, and rows that stopped are dropped from the
  batch (a quarter of it at a time: each drop copies the cache).

A row's tokens sit as `[shared prefix | padding | its own suffix | sampled tokens]` (the
batch's cache holds the part after the prefix): the padding is masked and position ids
count only real tokens, so each row computes what it would alone,
up to the floating-point differences of batched kernels (`tests/training/replay/samplers/test_hf.py`
holds it to the `generate` path's ids and logprobs). Tokens are chosen by `SeededSampling`, one
generator per row, as on the `generate` path.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from training.replay.samplers.base import Completion
from training.replay.samplers.buffered_cache import preallocated_cache
from training.replay.samplers.cascade import replaces, selected

KV = list[tuple[Any, Any]]  # per layer: keys and values, [1, kv heads, tokens, head dim]

#: A shared prefix shorter than this is not worth a separate forward and a stored cache.
MIN_SHARED = 16


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all `prompts` share.

    >>> common_prefix([(1, 2, 3), (1, 2, 4), (1, 2)])
    2
    """
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return n


def prefix_groups(prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """The indices of `prompts` in groups that each share a prefix of >= `MIN_SHARED` tokens, in
    order of each group's first prompt: sorted, the prompts split wherever neighbours share less.

    A batch whose prompts begin with different system prompts (an agent whose prompt was
    edited, several agents in one lake) shares only the chat template's first tokens; decoded
    as one batch, every row would forward its whole prompt. Each group instead forwards its
    own prefix once (and keeps it in the `PrefixStore`).

    >>> prefix_groups([(1,) * 20 + (2,), (3,) * 20, (1,) * 20 + (4,)])
    [[0, 2], [1]]
    """
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))
    groups: list[list[int]] = []
    for before, i in zip([None, *order], order, strict=False):
        if before is None or common_prefix([prompts[before], prompts[i]]) < MIN_SHARED:
            groups.append([])
        groups[-1].append(i)
    return sorted((sorted(group) for group in groups), key=lambda group: group[0])


class PrefixStore:
    """The KV caches of a few shared prefixes (batch 1), keyed by adapter and token ids, least
    recently used dropped first. A prefix's cache is valid only for the weights that computed it:
    the key names the adapter, and the sampler clears the store if an adapter is reloaded."""

    # 8: a few system prompts (`prefix_groups`) for the policy sampling now and the one before it
    # (SmolLM2's ~220-token prefix is ~10 MB in float32)
    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str | None, tuple[int, ...]], KV] = OrderedDict()

    def longest(self, adapter: str | None, ids: Sequence[int]) -> tuple[int, KV | None]:
        """The longest stored prefix of `ids` for `adapter`: its length and cache (0, None if none)."""
        best: tuple[int, KV | None] = (0, None)
        for (owner, key), kv in self._entries.items():
            if owner == adapter and best[0] < len(key) <= len(ids) and tuple(ids[: len(key)]) == key:
                best = (len(key), kv)
        if best[1] is not None:
            self._entries.move_to_end((adapter, tuple(ids[: best[0]])))
        return best

    def put(self, adapter: str | None, ids: Sequence[int], kv: KV) -> None:
        self._entries[(adapter, tuple(ids))] = kv
        self._entries.move_to_end((adapter, tuple(ids)))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _forward(model: Any, cache_kwarg: str, cache: Any, **inputs: Any) -> Any:
    return model(use_cache=True, logits_to_keep=1, **{cache_kwarg: cache}, **inputs).logits[:, -1].float()


def prefix_kv(
    model: Any, config: Any, cache_kwarg: str, store: PrefixStore, adapter: str | None, ids: Sequence[int]
) -> KV:
    """The cache of `ids` (one sequence): a stored prefix extended by what it lacks, then stored.

    Reuses a stored prefix that covers all but a few tokens of `ids` as it is (the batch then
    forwards those few per row), so batches whose shared prefixes differ in their last tokens
    (a question's first words) share one entry.
    """
    have, kv = store.longest(adapter, ids)
    if kv is not None and len(ids) - have <= max(8, len(ids) // 16):
        return kv
    cache = DynamicCache(config=config)
    if kv is not None:
        for layer, (k, v) in enumerate(kv):
            cache.update(k, v, layer)
    rest = torch.tensor([list(ids[have:])], device=model.device)
    positions = torch.arange(have, len(ids), device=model.device)[None, :]
    _forward(model, cache_kwarg, cache, input_ids=rest, position_ids=positions)
    layers: list[Any] = list(
        cache.layers
    )  # full-attention `DynamicLayer`s: this cache was built from the config
    kv = [(layer.keys, layer.values) for layer in layers]
    store.put(adapter, ids, kv)
    return kv


def sample_rows(
    model: Any,
    rows: Sequence[Sequence[int]],
    pick: Any,
    *,
    max_tokens: int,
    eos_ids: Sequence[int],
    pad: int,
    store: PrefixStore,
    adapter: str | None,
    cache_kwarg: str,
    cancels: Sequence[threading.Event | None] = (),
) -> list[Completion]:
    """One completion per row (a prompt's ids), each token chosen by `pick` (`SeededSampling`,
    one generator per row). `model` is what to call (the PEFT wrapper when an adapter is active);
    the adapter must already be selected. A row whose `cancels` event is set (its client left,
    the server stops) is finished at its next token and leaves the batch.

    Rows under different prefixes (`prefix_groups`) decode in one batch when cascade attention
    can give each run of rows its own prefix; otherwise each group is a batch of its own."""
    config = model.config
    unique: dict[tuple[int, ...], int] = {}
    owner = [unique.setdefault(tuple(r), len(unique)) for r in rows]
    prompts = list(unique)
    prefixes: list[tuple[list[int], KV | None]] = []  # each group's prompts and its prefix's cache
    for group in prefix_groups(prompts):
        members = [prompts[u] for u in group]
        shared = min(common_prefix(members), min(len(p) for p in members) - 1)  # each row feeds >= 1 token
        kv = (
            prefix_kv(model, config, cache_kwarg, store, adapter, members[0][:shared])
            if shared >= MIN_SHARED
            else None
        )
        prefixes.append((group, kv))
    # cascade attention stands in for `sdpa`, and only where every layer attends in full
    cascade = replaces(model) and all(
        type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers
    )
    together = cascade and all(kv is not None for _, kv in prefixes)
    rows_of: list[list[int]] = [[] for _ in prompts]
    for r, u in enumerate(owner):
        rows_of[u].append(r)
    completions: dict[int, Completion] = {}
    for batch in [prefixes] if together else [[p] for p in prefixes]:
        # the batch's rows, in runs of one prefix each (what cascade attention reads)
        names = [r for group, _ in batch for u in group for r in rows_of[u]]
        sampled = _sample_batch(
            model,
            [rows[r] for r in names],
            names,
            batch,
            [prompts[u] for group, _ in batch for u in group],
            pick,
            cascade=cascade,
            max_tokens=max_tokens,
            eos_ids=eos_ids,
            pad=pad,
            cache_kwarg=cache_kwarg,
            cancels=[cancels[r] for r in names] if cancels else (),
        )
        completions.update(zip(names, sampled, strict=True))
    return [completions[r] for r in range(len(rows))]


def _sample_batch(
    model: Any,
    rows: Sequence[Sequence[int]],
    names: Sequence[int],
    prefixes: Sequence[tuple[list[int], KV | None]],
    prompts: Sequence[tuple[int, ...]],
    pick: Any,
    *,
    cascade: bool,
    max_tokens: int,
    eos_ids: Sequence[int],
    pad: int,
    cache_kwarg: str,
    cancels: Sequence[threading.Event | None],
) -> list[Completion]:
    """One batch: `rows` (named `names` for `pick`) under `prefixes` (each group of distinct
    prompts with its prefix's cache; several only with `cascade`), `prompts` the batch's distinct
    prompts in the groups' order, which `rows` follows."""
    device = model.device
    config = model.config
    index = {prompt: u for u, prompt in enumerate(prompts)}
    owner = [index[tuple(r)] for r in rows]
    # each distinct prompt's shared length: its group's prefix, which a stored one may make a little shorter than asked
    shared_of = [0 if kv is None else kv[0][0].shape[-2] for group, kv in prefixes for _ in group]
    cascade = cascade and all(kv is not None for _, kv in prefixes)
    width = max(len(p) - s for p, s in zip(prompts, shared_of, strict=True))
    cache = preallocated_cache(config, width + max_tokens)
    extra: dict[str, Any] = {}
    # Cascade attention: the cache holds each row's own tokens only, and each prefix's one copy is
    # attended beside it. Otherwise (one group) the prefix's cache is copied to every row and the
    # mask covers it.
    masked = 0
    if cascade:
        extra["cascade_prefixes"] = [(prefix, len(group)) for group, prefix in prefixes]
    elif (kv := prefixes[0][1]) is not None:
        masked = shared_of[0]
        cache = preallocated_cache(config, masked + width + max_tokens)
        for layer, (k, v) in enumerate(kv):
            cache.update(k.expand(len(prompts), -1, -1, -1), v.expand(len(prompts), -1, -1, -1), layer)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), masked + width), dtype=torch.long)
    mask[:, :masked] = 1
    positions = torch.zeros((len(prompts), width), dtype=torch.long)
    for u, (prompt, shared) in enumerate(zip(prompts, shared_of, strict=True)):
        suffix = prompt[shared:]  # [shared | padding | suffix]: position ids count real tokens
        input_ids[u, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
        mask[u, masked + width - len(suffix) :] = 1
        positions[u] = shared
        positions[u, width - len(suffix) :] = torch.arange(shared, len(prompt))
    input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
    with selected(model) if cascade else contextlib.nullcontext():
        logits = _forward(
            model,
            cache_kwarg,
            cache,
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            **extra,
        )
        return _decode(
            model,
            rows,
            names,
            owner,
            pick,
            cache,
            logits,
            mask,
            runs=[len(group) for group, _ in prefixes] if cascade else None,
            max_tokens=max_tokens,
            eos_ids=eos_ids,
            cache_kwarg=cache_kwarg,
            cancels=cancels,
            extra=extra,
        )


def _decode(
    model: Any,
    rows: Sequence[Sequence[int]],
    names: Sequence[int],
    owner: Sequence[int],
    pick: Any,
    cache: Any,
    logits: Any,
    mask: Any,
    *,
    runs: Sequence[int] | None,
    max_tokens: int,
    eos_ids: Sequence[int],
    cache_kwarg: str,
    cancels: Sequence[threading.Event | None],
    extra: dict[str, Any],
) -> list[Completion]:
    """The decode loop after the prompts' forward (`logits`: one row per distinct prompt, which
    `owner` maps each row to): one token per unfinished row a step. `pick` knows the rows by
    `names`; `runs` counts the distinct prompts under each cascade prefix, in order."""
    device = logits.device
    if max(owner) + 1 < len(rows):  # each prompt's cache to its rows
        index = torch.tensor(owner, device=device)
        cache.batch_select_indices(index)
        logits, mask = logits[index], mask[index]
    next_position = torch.tensor([len(r) for r in rows], device=device)
    # the prefix each row attends (cascade): rows stay in runs as finished ones leave
    run_of = [run for run, count in enumerate(runs or ()) for _ in range(count)]
    run_of = [run_of[u] for u in owner] if runs else []

    eos = set(eos_ids)
    tokens: list[list[int]] = [[] for _ in rows]
    logprobs: list[list[float]] = [[] for _ in rows]
    live = list(range(len(rows)))  # the rows the batch holds, in its order
    done: set[int] = set()
    if runs:
        _count_runs(extra, run_of, live)
    while True:
        picked, chosen = pick.choose(
            None, logits, rows=[names[r] for r in live], idle={names[r] for r in done}
        )
        for r, token, lp in zip(live, picked.tolist(), chosen.tolist(), strict=True):
            if r in done:
                continue
            tokens[r].append(token)
            logprobs[r].append(lp)
            if token in eos or len(tokens[r]) >= max_tokens or (cancels and _is_set(cancels[r])):
                done.add(r)
        if len(done) == len(rows):
            break
        finished = [i for i, r in enumerate(live) if r in done]
        if len(finished) >= max(1, len(live) // 4):
            keep = torch.tensor([i for i, r in enumerate(live) if r not in done], device=device)
            cache.batch_select_indices(keep)
            mask, next_position, picked = mask[keep], next_position[keep], picked[keep]
            live = [r for r in live if r not in done]
            if runs:
                _count_runs(extra, run_of, live)
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        logits = _forward(
            model,
            cache_kwarg,
            cache,
            input_ids=picked[:, None],
            attention_mask=mask,
            position_ids=next_position[:, None],
            **extra,
        )
        next_position = next_position + 1
    return [
        Completion(tuple(t), tuple(lp), "stop" if t[-1] in eos else "length")
        for t, lp in zip(tokens, logprobs, strict=True)
    ]


def _count_runs(extra: dict[str, Any], run_of: Sequence[int], live: Sequence[int]) -> None:
    """Each cascade prefix's count of `live` rows (which lie in runs, one per prefix)."""
    counts = [0] * len(extra["cascade_prefixes"])
    for r in live:
        counts[run_of[r]] += 1
    extra["cascade_prefixes"] = [
        (kv, n) for (kv, _), n in zip(extra["cascade_prefixes"], counts, strict=True)
    ]


def _is_set(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()
