"""Which traces are ready to (re)assemble: the collector's and the exporter's bookkeeping.

A trace is assembled when its root span arrives (children end, and are exported,
before their parent, so the root is normally the last span), or after `idle_timeout_s`
without new spans when the root never comes. A span arriving for a trace that was
already assembled makes it ready again at once: the re-assembled rows supersede the old
ones by key. Memory is bounded: at most `max_tracked` traces are remembered.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from store.schema import LOG_KIND


@dataclass
class _Trace:
    last_seen: float
    root_seen: bool = False


class PendingTraces:
    """Thread-safe set of traces waiting for assembly."""

    def __init__(self, idle_timeout_s: float = 30.0, max_tracked: int = 200_000) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_tracked = max_tracked
        self._pending: dict[str, _Trace] = {}
        self._assembled: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, spans: pa.Table, now: float | None = None) -> None:
        """Note the traces of rows that were just committed to the lake."""
        if spans.num_rows == 0:
            return
        now = time.monotonic() if now is None else now
        roots = pc.and_(
            pc.is_null(spans.column("parent_span_id")), pc.not_equal(spans.column("kind"), LOG_KIND)
        )
        roots = pc.fill_null(roots, False).to_pylist()
        with self._lock:
            trace_ids = spans.column("trace_id").to_pylist()
            for trace_id, is_root in zip(trace_ids, roots, strict=True):
                entry = self._pending.get(trace_id)
                if entry is None:
                    # A late span of a trace assembled before makes it ready again at once.
                    entry = self._pending[trace_id] = _Trace(now, root_seen=trace_id in self._assembled)
                entry.last_seen = now
                entry.root_seen = entry.root_seen or bool(is_root)
            excess = len(self._pending) - self.max_tracked
            if excess > 0:
                # Over capacity: the oldest traces (dicts keep insertion order) are forced out
                # as ready on the next `take_ready`, whether or not their root has come.
                for trace_id in itertools.islice(self._pending, excess):
                    self._pending[trace_id].last_seen = float("-inf")

    def add(self, trace_ids: list[str], now: float | None = None) -> None:
        """Note traces known from the lake rather than from rows just committed (recovery):
        each waits out the idle timeout, in case its spans are still arriving."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for trace_id in trace_ids:
                self._pending.setdefault(trace_id, _Trace(now))

    def take_ready(self, now: float | None = None, *, everything: bool = False) -> list[str]:
        """Remove and return the traces ready now (all of them with `everything=True`)."""
        now = time.monotonic() if now is None else now
        ready = []
        with self._lock:
            for trace_id, entry in list(self._pending.items()):
                if everything or entry.root_seen or now - entry.last_seen >= self.idle_timeout_s:
                    ready.append(trace_id)
                    del self._pending[trace_id]
                    self._assembled[trace_id] = None
                    self._assembled.move_to_end(trace_id)
            while len(self._assembled) > self.max_tracked:
                self._assembled.popitem(last=False)
        return ready

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
