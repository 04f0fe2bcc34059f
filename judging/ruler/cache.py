"""A durable cache of judge verdicts, inside the lake: `<lake>/_cache/judge/<ab>/<key>.json`.

Keyed by (judge model, rubric hash, group content): the trajectory ids and every
message of every trajectory, canonically serialised. So a re-run, or a run killed
before its rewards were committed, never pays for the same judgement twice, while
any change to the group (a new trajectory, an edited message), the rubric or the judge
misses. The `_` prefix keeps the folder out of every table glob; files are JSON, one
per group, written under a temporary name and renamed, so a reader never sees half
an entry. Only successful verdicts are cached: failures are retried on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any

from store import Lake

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

    def __len__(self) -> int:
        root = self.lake.fs_path(*CACHE_DIR)
        if not self.lake.fs.exists(root):
            return 0
        return sum(1 for p in self.lake.fs.find(root) if p.endswith(".json"))
