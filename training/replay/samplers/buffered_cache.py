"""A KV cache for a decode loop that writes each step into preallocated buffers.

transformers' `DynamicLayer` concatenates its keys and values every step, so each step copies
the whole cache; the shared-prefix decode (`shared_prefix.py`) writes into buffers sized for
its batch instead, and drops finished rows by indexing them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def preallocated_cache(config: Any, capacity: int) -> Any:
    """A `DynamicCache` whose full-attention layers write into buffers of `capacity` tokens.

    `DynamicLayer` concatenates every step: at 64 rows of ~300 tokens that copy was 80% of a
    SmolLM2 decode step's time on a CPU. A model with other layer kinds (sliding windows)
    keeps those layers as they are.
    """
    cache = DynamicCache(config=config)
    cache.layers = [
        _BufferedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache


class _BufferedLayer(DynamicLayer):
    """A `DynamicLayer` that writes each step into a preallocated buffer (grown by doubling if
    ever too small) and hands attention a view of the filled part."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._k: Any = None
        self._v: Any = None

    def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
        self.device = key_states.device
        shape = (*key_states.shape[:2], self.capacity, key_states.shape[-1])
        self._k = torch.empty(shape, dtype=key_states.dtype, device=self.device)
        self._v = torch.empty(shape, dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self._k.shape[-2]:
            pad = (0, 0, 0, max(end, 2 * self._k.shape[-2]) - self._k.shape[-2])
            self._k = torch.nn.functional.pad(self._k, pad)
            self._v = torch.nn.functional.pad(self._v, pad)
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: Any) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]


def cohort_cache(config: Any, cohorts: list[Any]) -> Any:
    """A `DynamicCache` over the caches of several cohorts of rows (`preallocated_cache`s of
    full-attention layers, one per cohort, each of its own width; a cohort's `names` are its
    rows): a decode step writes each
    cohort's rows into its own buffers, and attention gets each cohort's keys and values apart
    (lists, for `cascade.cascade_attention`'s `cascade_cohorts`). Rows join a running batch as
    a new cohort, so no row's cache is ever copied to a common width. `cohorts` is the list the
    decode loop keeps: appending or removing a cohort's cache there changes this cache too."""
    cache = DynamicCache(config=config)
    cache.layers = [_CohortLayer(cohorts, layer) for layer in range(len(cache.layers))]
    return cache


class _CohortLayer(DynamicLayer):
    """One layer of `cohort_cache`: the rows of a step's keys and values go, in order, to each
    cohort's buffered layer, as many as that cohort holds."""

    def __init__(self, cohorts: list[Any], layer: int) -> None:
        super().__init__()
        self.cohorts = cohorts
        self.layer = layer
        self.is_initialized = True

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        parts = [cohort.layers[self.layer] for cohort in self.cohorts]
        sizes = [len(cohort.names) for cohort in self.cohorts]
        keys, values = [], []
        for part, k, v in zip(parts, key_states.split(sizes), value_states.split(sizes), strict=True):
            part_keys, part_values = part.update(k, v)
            keys.append(part_keys)
            values.append(part_values)
        return keys, values  # type: ignore[return-value]  # lists: `cascade_cohorts` reads them

    def get_seq_length(self) -> int:
        return max((cohort.layers[self.layer].length for cohort in self.cohorts), default=0)
