"""The collector's state: the write-ahead spool, the flusher thread and the assembler thread.

The HTTP endpoints (`ingest.otlp.app`) append redacted rows to the spool, which answers
once they are fsynced, so a 200 means durable. A flusher thread turns sealed spool
segments into large lake writes; an assembler thread assembles traces whose root span
has arrived (or that went idle). One `Collector` per process.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.errors import Overloaded, RedactionFailed, SpoolWriteFailed, describe_write_error
from ingest.lakeio import assemble_traces, pending_trace_ids
from ingest.otlp.config import CollectorConfig
from ingest.otlp.memory import allocators, release_memory, rss_mb
from ingest.otlp.spool import Spool, claim_spool, decode_table, encode_table, frame, read_segment
from ingest.pending import PendingTraces
from ingest.redact import redact_table
from store.errors import SchemaViolation
from store.lake import Lake
from store.writer import write

log = logging.getLogger("trajlake.ingest.otlp.collector")


@dataclass
class CollectorStats:
    requests: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    rows_flushed: int = 0
    files_written: int = 0
    trajectories_written: int = 0
    traces_failed: int = 0  # traces whose assembly failed (recorded in `ingest_errors`)
    metric_points: int = 0  # OTLP metric data points acknowledged on /v1/metrics (not stored)
    errors: int = 0


def default_spool_root(lake: Lake) -> Path:
    """Where collectors of `lake` keep their spools: one directory per live process under it."""
    if lake.is_local:
        return Path(lake.root) / "_spool"
    # A remote lake has no local directory of its own: spool under the user's cache, one folder
    # per lake URI so that collectors of different lakes never adopt each other's segments.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "trajlake" / "spool" / hashlib.sha256(lake.root.encode()).hexdigest()[:16]


class Collector:
    """The stateful part: spool, flusher thread, assembler thread. One per process."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.lake = Lake.of(config.lake)
        self._sealed = threading.Event()
        # A spool of this process's own: the configured directory, or one claimed under the
        # lake's spool root (where the spools of collectors that died are adopted on start).
        lock_fd = None
        self._spool_root: Path | None = None
        if config.spool_dir:
            directory = Path(config.spool_dir)
        else:
            self._spool_root = default_spool_root(self.lake)
            directory, lock_fd = claim_spool(self._spool_root)
        self.spool = Spool(
            directory,
            segment_bytes=config.flush_bytes,
            segment_seconds=config.flush_seconds,
            on_sealed=self._sealed.set,
            lock_fd=lock_fd,
            encode=self._encode,
        )
        self.pending = PendingTraces(idle_timeout_s=config.idle_timeout_s)
        self.stats = CollectorStats()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._flush_lock = threading.Lock()
        self.last_error: str | None = None
        # What fails right now, by operation (`spool`: accepting requests, `flush`: writing
        # the spool to the lake): /health reports it and it clears when the operation next
        # succeeds (space came back), unlike `last_error`'s one-off failures.
        self.failing: dict[str, str] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Open the spool (recovering what a previous run left) and start the background threads."""
        if self.config.exposure_warning:
            log.warning("%s", self.config.exposure_warning)
        self.spool.start(adopt_from=self._spool_root)
        self._sealed.set()  # recovered and adopted segments are flushed right away
        workers: list[tuple[str, Callable[[], None]]] = [("trajlake-flusher", self._flush_loop)]
        if self.config.assemble:
            workers.append(("trajlake-assembler", self._assemble_loop))
        for name, target in workers:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Commit and flush everything, assemble what is pending, stop the threads."""
        self.spool.close()
        self._stop.set()
        self._sealed.set()
        for thread in self._threads:
            thread.join(timeout=120)
        self._threads.clear()
        self.flush_sealed()
        if self.config.assemble:
            self.assemble_ready(everything=True)
        self.spool.release()

    # --- accepting ------------------------------------------------------------------------------

    def check_capacity(self) -> None:
        pending = self.spool.pending_bytes
        if pending > self.config.max_pending_bytes:
            raise Overloaded(
                pending, self.config.max_pending_bytes, self.config.retry_after_s, self.failing.get("flush")
            )

    async def accept(self, table: pa.Table) -> None:
        """Durably spool rows, redacted; returns once they are fsynced. A spool that cannot
        write (a full disk) raises `SpoolWriteFailed`, saying why."""
        if table.num_rows:
            try:
                await asyncio.wrap_future(self.spool.append(table))
            except OSError as exc:
                raise self._spool_failed(exc) from None
            self._recovered("spool")
        self.stats.rows_accepted += table.num_rows

    def submit(self, table: pa.Table) -> None:
        """`accept` for a caller off the event loop (the in-process exporter): blocks until fsynced."""
        if table.num_rows:
            try:
                self.spool.append(table).result()
            except OSError as exc:
                raise self._spool_failed(exc) from None
            self._recovered("spool")
        self.stats.rows_accepted += table.num_rows

    def _spool_failed(self, error: OSError) -> SpoolWriteFailed:
        failure = SpoolWriteFailed(str(self.spool.directory), error, self.config.retry_after_s)
        self._failed(
            "spool", f"spooling requests fails: {describe_write_error(error, str(self.spool.directory))}"
        )
        log.error("spool write failed: %s", error)
        return failure

    def _failed(self, operation: str, message: str) -> None:
        self.failing[operation] = message
        self.last_error = message

    def _recovered(self, operation: str) -> None:
        message = self.failing.pop(operation, None)
        if message is not None and self.last_error == message:
            self.last_error = None

    def _encode(self, tables: list[pa.Table]) -> pa.Buffer:
        """One spool record for the requests of a group commit: redacted together, in one pass."""
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
        try:
            table = redact_table(table, self.config.redaction)
        except Exception as exc:  # the user's redaction function: nothing unredacted is stored
            log.error("redaction failed: %s", exc)
            raise RedactionFailed(exc, self.config.retry_after_s) from exc
        return encode_table(table)

    # --- flushing -----------------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        busy = False
        while not self._stop.is_set():
            self._sealed.wait(timeout=0.5)
            self._sealed.clear()
            try:
                flushed = self.flush_sealed()
                self._recovered("flush")
                if busy and not flushed and not self.spool.pending_bytes:
                    release_memory()  # load is over: hand freed buffers back to the system
                busy = bool(flushed) or bool(self.spool.pending_bytes)
            except Exception as exc:
                # The segment stays in the spool and is retried; nothing acknowledged is lost.
                self.stats.errors += 1
                cause = describe_write_error(exc, self.lake.root)
                self._failed(
                    "flush", f"writing the spool to the lake fails: {cause}; the spans wait in the spool"
                )
                log.exception("flushing the spool to %s failed; will retry", self.lake)
                self._stop.wait(1.0)

    def flush(self) -> int:
        """Seal the active spool segment and write everything spooled to the lake now."""
        self.spool.rotate().result(timeout=60)
        return self.flush_sealed()

    def flush_sealed(self) -> int:
        """Write every sealed spool segment to the lake's `spans` table, then delete it."""
        rows = 0
        with self._flush_lock:
            for segment in self.spool.sealed_segments():
                records, _ = read_segment(segment)
                if records:
                    try:
                        table = pa.concat_tables(
                            [decode_table(r) for r in records], promote_options="default"
                        )
                        result = write(self.lake, "spans", table, durable=True)
                    except (pa.ArrowInvalid, SchemaViolation) as exc:
                        # Not a transient failure (those are OSErrors, retried): write the
                        # records one by one and keep only the bad ones aside, rather than
                        # block the spool forever or hold good rows back with a bad one.
                        rows += self._write_one_by_one(segment, records, exc)
                        self.spool.remove(segment)
                        continue
                    self.stats.rows_flushed += result.rows
                    self.stats.files_written += result.files_added
                    rows += result.rows
                    if self.config.assemble:
                        self.pending.observe(table)
                self.spool.remove(segment)
        return rows

    def _write_one_by_one(self, segment: Path, records: list[memoryview], first_error: Exception) -> int:
        rows = 0
        failed = segment.with_suffix(".failed")
        for record in records:
            try:
                table = decode_table(record)
                result = write(self.lake, "spans", table, durable=True)
            except (pa.ArrowInvalid, SchemaViolation) as exc:
                with failed.open("ab") as handle:  # same record format: readable with `read_segment`
                    handle.write(frame(record))
                    handle.flush()
                    os.fsync(handle.fileno())
                self.stats.errors += 1
                self.last_error = f"a spooled batch could not be written ({exc}); kept in `{failed}`"
                log.error(self.last_error)
                continue
            rows += result.rows
            self.stats.rows_flushed += result.rows
            self.stats.files_written += result.files_added
            if self.config.assemble:
                self.pending.observe(table)
        log.warning("segment %s needed a record-by-record write after: %s", segment.name, first_error)
        return rows

    # --- assembling -------------------------------------------------------------------------------

    def _assemble_loop(self) -> None:
        self._assembling("finding unassembled traces", self.recover_pending)
        while not self._stop.wait(self.config.assemble_interval_s):
            self._assembling("assembling trajectories", self.assemble_ready)

    def _assembling(self, what: str, step: Callable[[], object]) -> None:
        """One step of the assembling thread; a failure is counted and shown, never fatal to the
        thread: the spans are in the lake, and `trajlake assemble` rebuilds what was missed."""
        try:
            step()
        except Exception as exc:
            self.stats.errors += 1
            self.last_error = f"{what} failed: {exc}; `trajlake assemble` rebuilds them"
            log.exception("%s in %s failed", what, self.lake)

    def recover_pending(self) -> int:
        """Queue the traces whose spans are in the lake but were never assembled.

        The pending set lives in memory: a collector killed between flushing a trace's
        spans and assembling it would otherwise leave that trace without a trajectory.
        """
        if self.config.recover_hours <= 0:
            return 0
        trace_ids = pending_trace_ids(self.lake, written_within=timedelta(hours=self.config.recover_hours))
        self.pending.add(trace_ids)
        if trace_ids:
            log.info("%d traces in %s were never assembled; queued", len(trace_ids), self.lake)
        return len(trace_ids)

    def assemble_ready(self, *, everything: bool = False) -> int:
        ready = self.pending.take_ready(everything=everything)
        if not ready:
            return 0
        result = assemble_traces(self.lake, ready)
        self.stats.trajectories_written += result.trajectories
        self.stats.traces_failed += result.failed
        return result.trajectories

    def health(self) -> dict[str, Any]:
        """What `GET /health` answers (without authentication, as probes expect): with
        credentials configured it leaves out the lake's path, which is not the probe's business."""
        warning = self.config.exposure_warning
        return {
            "status": "failing" if self.failing else "ok",
            "failing": sorted(self.failing.values()),
            "last_error": self.last_error,
            **({} if self.config.auth else {"lake": self.lake.root}),
            "auth": self.config.auth,
            "warnings": [warning] if warning else [],
            "rss_mb": round(rss_mb(), 1),
            "allocators": allocators(),
            "pending_bytes": self.spool.pending_bytes,
            "pending_traces": len(self.pending),
            "spool_segments": len(self.spool.segments()),
            **self.stats.__dict__,
        }
