"""Who owns a spool directory: one process at a time, by an exclusive `flock`.

Several collectors on one lake each claim their own directory under the spool root
(`claim_spool`); a collector that starts after another died adopts the dead one's
unflushed segments (`adopt_orphans`), so nothing acknowledged waits for a process that
will not come back.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from ingest.errors import SpoolBusy

log = logging.getLogger("trajlake.ingest.otlp.spool")

LOCK_FILE = "LOCK"


def lock_directory(directory: Path) -> int:
    """Take the directory's exclusive lock (kept until the process ends); `SpoolBusy` if held."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise SpoolBusy(str(directory), holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}\n".encode(), 0)
    return fd


def claim_spool(root: Path) -> tuple[Path, int]:
    """A spool directory under `root` that no live process owns (a new one if all are owned),
    locked for this process: (directory, lock fd)."""
    root.mkdir(parents=True, exist_ok=True)
    for candidate in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("c-")):
        try:
            return candidate, lock_directory(candidate)
        except SpoolBusy:
            continue
    index = 0
    while True:
        candidate = root / f"c-{index:04d}"
        if not candidate.exists():
            try:
                return candidate, lock_directory(candidate)
            except SpoolBusy:
                pass  # another process created and took it a moment ago
        index += 1


def adopt_orphans(root: Path, own: Path, next_seq: int) -> int:
    """Move the segments of spool directories no live process owns into `own` (numbered from
    `next_seq`) and remove those directories; returns the next free sequence number."""
    if not root.is_dir():
        return next_seq
    # The root itself holds the segments of the previous release's single spool, if any.
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("c-"))]
    for other in (c for c in candidates if c != own):
        try:
            fd = lock_directory(other)
        except SpoolBusy:
            continue  # a live collector's
        try:
            for segment in sorted(other.glob("seg-*.wal")):
                next_seq += 1
                os.replace(segment, own / f"seg-{next_seq:012d}.wal")
            for leftover in other.glob("*.failed"):
                os.replace(leftover, own / f"adopted-{other.name}-{leftover.name}")
            fsync_directory(own)
            if other != root:
                (other / LOCK_FILE).unlink(missing_ok=True)
                other.rmdir()
        except OSError as exc:
            log.warning("could not adopt the orphaned spool %s: %s", other, exc)
        finally:
            os.close(fd)
    return next_seq


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
