"""A write's rows between reading them from the caller and committing them.

Read once (the input may be a generator), re-read per commit attempt: conformed and
stamped batches are held in memory up to `SPILL_BYTES`, beyond that in a local Arrow IPC
file, so memory stays bounded by one batch whatever the write's size. On the way in it
notes what the commit needs to know: the keys' hashes (`store.keys`), the partitions
written, the earliest arrival time, and which rows a later row of the same key supersedes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.keys import key_hashes
from store.schema import PARTITION_COLUMN, TIMESTAMP, WRITTEN_AT, TableSpec

SPILL_BYTES = 256 * 1024 * 1024  # a write holds this much in memory before spilling to a local file


class Spill:
    """Conformed, stamped rows, read once from the caller and re-read per commit attempt: in memory
    up to `SPILL_BYTES`, beyond that in a local Arrow IPC file (memory stays bounded by one batch)."""

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.path: str | None = None
        self.rows = 0
        self.partitions: set[date] = set()
        self.keep: pa.Array | None = None  # per row, whether it is its key's last row (None: all are)
        self.hashes = np.empty(0, np.uint64)  # of the kept rows' keys (`store.keys`)
        self.arrived_from: datetime | None = None  # the earliest `spec.arrival` of the rows
        self._keys: list[pa.RecordBatch] = []
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0

    def fill(self, batches: Iterator[pa.RecordBatch], stamp: pa.Scalar) -> None:
        sink: Any = None
        out: Any = None
        try:
            for batch in batches:
                stamps = pc.coalesce(batch.column(WRITTEN_AT), pa.scalar(stamp, TIMESTAMP))
                batch = batch.set_column(batch.schema.get_field_index(WRITTEN_AT), WRITTEN_AT, stamps)
                self._note(batch)
                if out is None:
                    self._held.append(batch)
                    self._held_bytes += batch.nbytes
                    if self._held_bytes > SPILL_BYTES:
                        handle, self.path = tempfile.mkstemp(
                            prefix=f"trajlake-{self.spec.name}-", suffix=".arrows"
                        )
                        os.close(handle)
                        sink = pa.OSFile(self.path, "wb")
                        out = pa.ipc.new_stream(sink, self.spec.schema)
                        for held in self._held:
                            out.write_batch(held)
                        self._held = []
                else:
                    out.write_batch(batch)
        finally:
            if out is not None:
                out.close()
                sink.close()
        self._find_repeats()

    def _note(self, batch: pa.RecordBatch) -> None:
        self._keys.append(batch.select(list(self.spec.key)))
        if self.spec.partitioned:
            self.partitions.update(pc.unique(batch.column(PARTITION_COLUMN)).to_pylist())
        if self.spec.arrival:
            first = pc.min(batch.column(self.spec.arrival)).as_py()
            if first is not None and (self.arrived_from is None or first < self.arrived_from):
                self.arrived_from = first
        self.rows += batch.num_rows

    def _find_repeats(self) -> None:
        """Mark, for keys that repeat within the write, every row but the last (vectorised)."""
        if not self._keys:
            return
        keys = pa.Table.from_batches(self._keys)
        self._keys = []
        self.hashes = key_hashes(keys)
        if len(np.unique(self.hashes)) == self.rows:
            return  # every key once (distinct hashes prove it): nothing to drop
        rows = keys.append_column("__row", pa.array(range(self.rows), pa.int64()))
        last = rows.group_by(list(self.spec.key), use_threads=False).aggregate([("__row", "max")])
        if last.num_rows == self.rows:
            return
        self.keep = pc.is_in(pa.array(range(self.rows), pa.int64()), value_set=last.column("__row_max"))
        self.hashes = self.hashes[self.keep.to_numpy(zero_copy_only=False)]
        self.rows = last.num_rows

    def reader(self) -> pa.RecordBatchReader:
        """The rows, in order, without the superseded ones."""
        source: Any = (
            # Read, not memory-mapped: mapped pages stay resident (and count against the
            # process) until the whole file is unmapped; read batches are freed as they go.
            pa.ipc.open_stream(pa.OSFile(self.path, "rb"))
            if self.path
            else pa.RecordBatchReader.from_batches(self.spec.schema, iter(self._held))
        )
        if self.keep is None:
            return source
        keep = self.keep

        def kept() -> Iterator[pa.RecordBatch]:
            offset = 0
            for batch in source:
                yield batch.filter(keep.slice(offset, batch.num_rows))
                offset += batch.num_rows

        return pa.RecordBatchReader.from_batches(self.spec.schema, kept())

    def close(self) -> None:
        self._held = []
        if self.path:
            Path(self.path).unlink(missing_ok=True)
