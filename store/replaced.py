"""Files that compaction replaced and that wait for their grace period before deletion.

Compaction commits a merged file first and then records the files it replaced in
`<lake>/_compaction/<table>/pending-….json` (written to a temporary and renamed, so a
record is whole or absent). Readers leave recorded files out of their snapshot: every
recorded file's rows are in a compacted file committed before the record was written.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from store.lake import Lake
from store.layout import base_name

STATE_DIR = "_compaction"


def state_dir(lake: Lake, table: str) -> str:
    return lake.fs_path(STATE_DIR, table)


def record_replaced(lake: Lake, table: str, files: Sequence[str]) -> None:
    """Note `files` as replaced now, atomically (write a temporary, then rename)."""
    directory = state_dir(lake, table)
    lake.fs.makedirs(directory, exist_ok=True)
    name = f"pending-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
    body = json.dumps({"replaced_at": time.time(), "files": list(files)}).encode()
    temp = f"{directory}/.{name}.tmp"
    with lake.fs.open(temp, "wb") as handle:
        handle.write(body)
    lake.fs.mv(temp, f"{directory}/{name}")


def pending_files(lake: Lake, table: str) -> set[str]:
    """Files already replaced by a compacted file and waiting for their grace period."""
    return {path for entry in pending_logs(lake, table) for path in entry[1]["files"]}


def pending_logs(lake: Lake, table: str) -> list[tuple[str, dict[str, Any]]]:
    directory = state_dir(lake, table)
    logs = []
    for log in sorted(
        p for p in list_files(lake, directory, recursive=False) if base_name(p).startswith("pending-")
    ):
        try:
            with lake.fs.open(log, "rb") as handle:
                logs.append((log, json.loads(handle.read())))
        except FileNotFoundError:  # reclaimed meanwhile: its files are gone too
            continue
    return logs


def list_files(lake: Lake, directory: str, recursive: bool) -> list[str]:
    """Files under `directory` (hidden ones included), fresh from the store."""
    if not lake.is_local:
        lake.fs.invalidate_cache()
    if not lake.fs.exists(directory):
        return []
    if recursive:
        return list(lake.fs.find(directory))
    return [e["name"] for e in lake.fs.ls(directory, detail=True) if e.get("type") == "file"]
