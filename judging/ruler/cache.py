"""A durable cache of judge verdicts, inside the lake: `<lake>/_cache/judge/<ab>/<key>.json`.

Keyed by (judge model, rubric hash, group content): the trajectory ids and every
message of every trajectory, canonically serialised. So a re-run, or a run killed
before its rewards were committed, never pays for the same judgement twice, while
any change to the group (a new trajectory, an edited message), the rubric or the judge
misses. The `_` prefix keeps the folder out of every table glob; files are JSON, one
per group, written under a temporary name and renamed, so a reader never sees half
an entry. Only successful verdicts are cached: failures are retried on the next run.

Several workers judging the same lake at once (two `trajlake score` processes, Dask
workers) judge each group once: before calling the judge a worker claims the key
(`<key>.claim`, created exclusively); a worker that finds a fresh claim waits for the
entry instead of paying for the same verdict, and judges it itself only when the claimant
gave up (its claim gone without an entry) or went silent past the claim's time to live
(a killed worker). Claims are local-file locks: on an object store each worker judges
what it misses (a verdict is still written whole).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any

from store.lake import Lake

CACHE_DIR = ("_cache", "judge")


def cache_key(model: str, rubric_hash: str, trajectories: list[dict[str, Any]]) -> str:
    """sha256 over the judge, the rubric and the group's content (order-independent)."""
    group = sorted(
        (
            str(t["trajectory_id"]),
            [
                {
                    k: m.get(k)
                    for k in ("role", "content", "name", "tool_call_id", "tool_calls", "is_error")
                    if m.get(k) is not None
                }
                for m in (t.get("messages") or [])
            ],
        )
        for t in trajectories
    )
    blob = json.dumps({"judge": model, "rubric": rubric_hash, "group": group}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class JudgeCache:
    """Get and put verdict entries for one lake. Safe for concurrent writers (atomic rename)."""

    def __init__(self, lake: Lake | str | os.PathLike[str]) -> None:
        self.lake = Lake.of(lake)

    def _path(self, key: str) -> str:
        return self.lake.fs_path(*CACHE_DIR, key[:2], f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached entry, or None (a missing or unreadable entry is a miss, never an error)."""
        path = self._path(key)
        try:
            with self.lake.fs.open(path, "r") as handle:
                entry = json.load(handle)
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        return entry if isinstance(entry, dict) and entry.get("key") == key else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store `entry` under `key` atomically."""
        payload = json.dumps({**entry, "key": key}, ensure_ascii=False, default=str)
        path = self._path(key)
        if self.lake.is_local:
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            temp = os.path.join(directory, f".{key}.{uuid.uuid4().hex[:8]}.tmp")
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        else:
            # An object-store PUT is atomic: readers see the old object or the new one.
            self.lake.fs.pipe_file(path, payload.encode())

    def forget(self, needles: Sequence[str], *, dry_run: bool = False) -> int:
        """Delete every entry (and claim) that mentions one of `needles` (trajectory or group
        ids of erased conversations: a verdict quotes its trajectories' ids and explanations
        about their content); returns the entries deleted (`dry_run`: that would be)."""
        from store.erasure.verify import needle_pattern

        pattern = needle_pattern(needles, whole_values=True)  # as the entry's JSON quotes them
        root = self.lake.fs_path(*CACHE_DIR)
        if pattern is None or not self.lake.fs.exists(root):
            return 0
        deleted = 0
        for path in self.lake.fs.find(root):
            if pattern.search(self.lake.fs.cat_file(path)):
                if not dry_run:
                    self.lake.fs.rm(path)
                deleted += str(path).endswith(".json")
        return deleted

    def __len__(self) -> int:
        root = self.lake.fs_path(*CACHE_DIR)
        if not self.lake.fs.exists(root):
            return 0
        return sum(1 for p in self.lake.fs.find(root) if p.endswith(".json"))

    def _claim_path(self, key: str) -> str:
        return self.lake.fs_path(*CACHE_DIR, key[:2], f"{key}.claim")

    def claim(self, key: str, ttl_s: float) -> bool:
        """Take the right to judge `key`; False while another live worker holds it."""
        if not self.lake.is_local:
            return True
        path = self._claim_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not _abandoned(path, ttl_s):
                    return False
                try:
                    os.remove(path)  # its claimant died or went silent past the time to live: take over
                except FileNotFoundError:
                    pass  # released meanwhile: try again
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(
                    json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()})
                )
            return True
        return False

    def release(self, key: str) -> None:
        """Give up the claim on `key` (after the entry is written, or on failure)."""
        if self.lake.is_local:
            try:
                os.remove(self._claim_path(key))
            except FileNotFoundError:
                pass

    def wait_for(self, key: str, ttl_s: float, poll_s: float = 0.1) -> dict[str, Any] | None:
        """The entry another worker is judging, once written; None when its claim ends without one."""
        path = self._claim_path(key)
        while True:
            entry = self.get(key)
            if entry is not None:
                return entry
            if not os.path.exists(path):
                return self.get(key)  # released: written just now, or given up
            if _abandoned(path, ttl_s):
                return None
            time.sleep(poll_s)


def _abandoned(path: str, ttl_s: float) -> bool:
    """A claim whose worker is gone: a dead process on this host, or silent past `ttl_s`."""
    try:
        age = time.time() - os.path.getmtime(path)
        with open(path, encoding="utf-8") as handle:
            owner = json.loads(handle.read() or "{}")
    except FileNotFoundError:
        return False
    except (ValueError, OSError):
        owner = {}  # being written this instant: judge it by its age
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
    return age > ttl_s
