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
