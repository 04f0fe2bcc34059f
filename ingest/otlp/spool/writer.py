"""The spool's writer: group commits into the active segment, sealing, recovery and removal."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.otlp.spool.ownership import adopt_orphans, lock_directory
from ingest.otlp.spool.records import HEADER, Payload, header, record_size

log = logging.getLogger("trajlake.ingest.otlp.spool")

_GROUP_MAX_BYTES = 32 * 1024 * 1024
_STOP = object()
_ROTATE = "rotate"


class Spool:
    """Append-only, group-committed, segment-rotating write-ahead log in one local directory."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int,
        segment_seconds: float,
        on_sealed: Callable[[], None] | None = None,
        lock_fd: int | None = None,
        encode: Callable[[list[pa.Table]], Payload] | None = None,
    ) -> None:
        self.directory = Path(directory)
        # With `encode`, `append` takes Arrow tables and each group commit encodes the tables
        # it gathered as one record (one redaction pass and one IPC stream for many requests).
        self.encode = encode
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.on_sealed = on_sealed
        self._queue: queue.Queue[object] = queue.Queue()
        self._lock = threading.Lock()
        self._rotate_lock = threading.Lock()  # the flusher never sees a half-rotated spool
        self._active: Path | None = None
        self._file: object | None = None
        self._active_bytes = 0
        self._active_since = 0.0
        self._seq = 0
        self._queued_bytes = 0
        self._disk_bytes = (
            0  # bytes in segment files not yet removed (kept as a counter: no stat per request)
        )
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = lock_fd
        self.committed_records = 0

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, *, adopt_from: Path | None = None) -> None:
        """Own the directory and open the spool; segments left by a previous run (and, with
        `adopt_from`, by dead collectors' spools beside it) are sealed and wait for the flusher."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._lock_fd is None:
            self._lock_fd = lock_directory(self.directory)
        self._seq = max((int(p.stem.split("-")[1]) for p in self.segments()), default=0)
        if adopt_from is not None:
            self._seq = adopt_orphans(adopt_from, self.directory, self._seq)
        existing = self.segments()
        with self._lock:
            self._disk_bytes = sum(p.stat().st_size for p in existing)
        self._open_new()
        self._thread = threading.Thread(target=self._run, name="trajlake-spool", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Commit everything queued, then seal the active segment."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        with self._rotate_lock:
            self._seal()

    def release(self) -> None:
        """Give up ownership of the directory (after the last flush); a new process may claim it."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- appending -----------------------------------------------------------------------------

    def append(self, item: Payload | pa.Table) -> concurrent.futures.Future[None]:
        """Queue one record (bytes, or a table for a spool with `encode`); the future resolves once
        it is fsynced, or fails with the OS error (or the encoder's error, for this item alone)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._thread is None or not self._thread.is_alive():
            future.set_exception(OSError("the spool is not running"))
            return future
        with self._lock:
            self._queued_bytes += record_size(item)
        self._queue.put((item, future))
        return future

    def rotate(self) -> concurrent.futures.Future[None]:
        """Seal the active segment now (after everything queued before this call is committed)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._thread is None:  # not started, or closed (and so already sealed): nothing to rotate
            future.set_result(None)
            return future
        self._queue.put((_ROTATE, future))
        return future

    def _run(self) -> None:
        # The writer thread must outlive any error: if it died, every later request would
        # wait forever. Failures fail the requests in flight (the collector answers 503 and
        # the client retries) and the next round starts from a fresh segment.
        group: list[tuple[Payload, concurrent.futures.Future[None]]] = []
        while True:
            try:
                if self._round(group):
                    return
            except Exception as exc:
                log.exception("spool writer error; failing %d queued request(s) and reopening", len(group))
                for payload, future in group:
                    if not future.done():
                        with self._lock:
                            self._queued_bytes -= record_size(payload)
                        future.set_exception(exc if isinstance(exc, OSError) else OSError(str(exc)))
                self._reopen()
            group = []

    def _recount(self) -> None:
        """Resynchronise the on-disk byte counter with the files really there (after a failure)."""
        total = 0
        for path in self.segments():
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
        with self._lock:
            self._disk_bytes = total

    def _reopen(self) -> None:
        self._recount()
        try:
            with self._rotate_lock:
                if self._file is not None:
                    os.close(self._file)  # type: ignore[arg-type]
                    self._file = None
                self._open_new()
        except OSError as exc:  # e.g. the disk is gone: keep serving 503s, try again next round
            log.error("spool cannot open a new segment in %s: %s", self.directory, exc)
            time.sleep(0.5)

    def _round(self, group: list[tuple[Payload, concurrent.futures.Future[None]]]) -> bool:
        """One group commit; True when the spool is stopping. Fills `group` as it goes."""
        while True:
            try:
                item = self._queue.get(timeout=self._wait())
            except queue.Empty:
                self._maybe_rotate()
                continue
            if isinstance(item, tuple) and item[0] is _ROTATE:
                self._maybe_rotate(force=True)
                item[1].set_result(None)
                continue
            stop = item is _STOP
            if not stop:
                group.append(item)  # type: ignore[arg-type]
            size = sum(record_size(p) for p, _ in group)
            while size < _GROUP_MAX_BYTES:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    continue
                if isinstance(more, tuple) and more[0] is _ROTATE:
                    self._queue.put(more)  # handled after this group is committed
                    break
                group.append(more)  # type: ignore[arg-type]
                size += record_size(more[0])  # type: ignore[index]
            if group:
                self._commit(group, size)
            self._maybe_rotate()
            return stop

    def _records(
        self, group: list[tuple[Any, concurrent.futures.Future[None]]]
    ) -> list[tuple[Payload, list[concurrent.futures.Future[None]]]]:
        """The group as records to write, each with the requests it answers. An item the encoder
        refuses fails alone (its request gets the error); the others are still written."""
        if self.encode is None:
            return [(payload, [future]) for payload, future in group]
        try:
            return [(self.encode([item for item, _ in group]), [future for _, future in group])]
        except Exception:
            if len(group) == 1:
                raise
        records = []
        for item, future in group:
            try:
                records.append((self.encode([item]), [future]))
            except Exception as exc:
                future.set_exception(exc)
        return records

    def _commit(self, group: list[tuple[Any, concurrent.futures.Future[None]]], size: int) -> None:
        try:
            records = self._records(group)
        except Exception as exc:  # the only item of the group failed to encode
            with self._lock:
                self._queued_bytes -= size
            group[0][1].set_exception(exc)
            return
        group = [(payload, future) for payload, futures in records for future in futures]
        try:
            chunks: list[Payload] = []
            for payload, _ in records:
                chunks.append(header(payload))
                chunks.append(payload)
            if self._file is None:
                with self._rotate_lock:  # the OS's own error (a full disk) if it still fails
                    self._open_new()
            fd = self._file
            if fd is None:
                raise OSError(f"spool directory {self.directory} is not writable")
            _write_all(fd, chunks)  # type: ignore[arg-type]
            os.fsync(fd)  # type: ignore[arg-type]
            if os.fstat(fd).st_nlink == 0:  # type: ignore[arg-type]
                # Someone removed the segment (or the spool directory): these bytes would
                # never reach the lake, so they are not acknowledged; the client retries.
                raise FileNotFoundError(f"spool segment {self._active} was removed from under the collector")
        except OSError as exc:
            log.error("spool write failed: %s", exc)
            with self._lock:
                self._queued_bytes -= size
            for _, future in group:
                future.set_exception(exc)
            # The segment may now end in a partial record; start a fresh one so later
            # records are not hidden behind it (recovery stops at the first bad record).
            try:
                with self._rotate_lock:
                    self._seal()
                    self._open_new()
            except OSError as again:
                log.error("spool cannot open a new segment in %s: %s", self.directory, again)
                self._file = None
            self._recount()
            return
        written = sum(len(payload) for payload, _ in records) + HEADER.size * len(records)
        if self._active_bytes == 0:
            self._active_since = time.monotonic()
        self._active_bytes += written
        self.committed_records += len(records)
        with self._lock:
            self._queued_bytes -= size
            self._disk_bytes += written
        for _, future in group:
            future.set_result(None)

    # --- segments ------------------------------------------------------------------------------

    def _wait(self) -> float:
        if self._active_bytes == 0:
            return 0.5
        return max(0.01, self.segment_seconds - (time.monotonic() - self._active_since))

    def _maybe_rotate(self, *, force: bool = False) -> None:
        if self._active_bytes == 0:
            return
        aged = time.monotonic() - self._active_since >= self.segment_seconds
        if force or self._active_bytes >= self.segment_bytes or aged:
            with self._rotate_lock:
                self._seal()
                self._open_new()

    def _open_new(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)  # recreated if something removed it
        self._seq += 1
        self._active = self.directory / f"seg-{self._seq:012d}.wal"
        self._file = os.open(self._active, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._active_bytes = 0
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the new file's directory entry is durable before any ack
        finally:
            os.close(dir_fd)

    def _seal(self) -> None:
        if self._file is None:
            return
        os.close(self._file)  # type: ignore[arg-type]
        self._file = None
        sealed, self._active = self._active, None
        if sealed is not None and self._active_bytes == 0:
            sealed.unlink(missing_ok=True)
        elif self.on_sealed is not None:
            self.on_sealed()
        self._active_bytes = 0

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob("seg-*.wal"))

    def sealed_segments(self) -> list[Path]:
        """Segments ready for the flusher (everything but the one being written)."""
        with self._rotate_lock:
            active = self._active
            return [p for p in self.segments() if p != active]

    def remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        path.unlink(missing_ok=True)
        with self._lock:
            self._disk_bytes = max(0, self._disk_bytes - size)

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted or queued that are not yet in the lake."""
        with self._lock:
            return self._disk_bytes + self._queued_bytes


def _write_all(fd: int, chunks: list[Payload]) -> None:
    """Write `chunks` in order with as few system calls as the kernel allows (no joined copy)."""
    views = [memoryview(chunk).cast("B") for chunk in chunks]
    while views:
        written = os.writev(fd, views[:1024])  # IOV_MAX
        if written == 0:
            raise OSError(f"spool write made no progress on file descriptor {fd}")
        while views and written >= len(views[0]):
            written -= len(views.pop(0))
        if written:
            views[0] = views[0][written:]
