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
  cache is kept once for that prompt's rows, which cache only what they sample; the shared
  prefix's cache is never copied either: every row attends its one copy (`cascade.py`).
  Unless a layer is not full attention: then the prefix's and each prompt's caches are copied
  to the rows;
- decoding feeds one token per unfinished row, finished rows leave the batch, and a
  rollout's next turn joins the running batch as a cohort of its own (continuous batching:
  `decode_loop.py`).

A row's tokens sit as `[shared prefix | padding | its prompt's rest | sampled tokens]`, each
part cached once for the rows that share it: the padding is masked and position ids
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

from training.replay.samplers.base import Completion
from training.replay.samplers.cascade import cascades, selected
from training.replay.samplers.decode_loop import KV, Admit, Decoder, Finished, forward

#: A shared prefix shorter than this is not worth a separate forward and a stored cache.
MIN_SHARED = 16


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all `prompts` share.

    >>> common_prefix([(1, 2, 3), (1, 2, 4), (1, 2)])
    2
    """
    first, n = tuple(prompts[0]), min(len(p) for p in prompts)
    for prompt in prompts[1:]:
        other = tuple(prompt)
        low, high = 0, n  # the longest k with equal first k tokens: slices compare in C
        while low < high:
            middle = (low + high + 1) // 2
            if other[:middle] == first[:middle]:
                low = middle
            else:
                high = middle - 1
        n = low
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
    forward(model, cache_kwarg, cache, input_ids=rest, position_ids=positions)
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
    admit: Admit | None = None,
    finished: Finished | None = None,
    max_rows: int = 512,
) -> list[Completion]:
    """One completion per row (a prompt's ids), each token chosen by `pick` (`SeededSampling`,
    one generator per row). `model` is what to call (the PEFT wrapper when an adapter is active);
    the adapter must already be selected. A row whose `cancels` event is set (its client left,
    the server stops) is finished at its next token and leaves the batch.

    Rows under different prefixes (`prefix_groups`) decode in one batch when cascade attention
    can give each run of rows its own prefix; otherwise each group is a batch of its own.

    Continuous batching (`admit`, with cascade attention): between decode steps, rows whose
    prompt extends one of the batch's prefixes (a rollout's next turn) join the running batch,
    up to `max_rows` rows, each prefilled beside it (`decode_loop.Decoder`) and then decoded in its steps;
    `finished` hears of each row (the batch's and the joiners', by `pick`'s name) as it ends,
    so its request can be answered, and its rollout go on, while the batch runs. The returned
    list covers `rows` only."""
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
    cascade = cascades(model)
    together = cascade and all(kv is not None for _, kv in prefixes)
    rows_of: list[list[int]] = [[] for _ in prompts]
    for r, u in enumerate(owner):
        rows_of[u].append(r)
    completions: dict[int, Completion] = {}
    batches = [prefixes] if together else [[p] for p in prefixes]
    for number, batch in enumerate(batches):
        # the batch's rows, in runs of one prefix each (what cascade attention reads)
        names = [r for group, _ in batch for u in group for r in rows_of[u]]
        cascaded = cascade and all(kv is not None for _, kv in batch)
        decoder = Decoder(
            model,
            pick,
            cascade=cascaded,
            max_tokens=max_tokens,
            eos_ids=eos_ids,
            pad=pad,
            cache_kwarg=cache_kwarg,
            cancels={r: cancels[r] for r in names} if cancels else {},
            finished=finished,
            prefixes=[
                (tuple(prompts[group[0]][: kv[0][0].shape[-2]]), kv) for group, kv in batch if kv is not None
            ],
        )
        with selected(model) if decoder.cascade else contextlib.nullcontext():
            decoder.start(
                [rows[r] for r in names],
                names,
                batch,
                [prompts[u] for group, _ in batch for u in group],
            )
            last = number == len(batches) - 1
            sampled = decoder.run(admit if last and decoder.cascade else None, max_rows)
        completions.update((r, sampled[r]) for r in names)
    return [completions[r] for r in range(len(rows))]
