"""Checking an erasure: no file under the lake may still hold an erased value.

`forget` says the data is gone only after `verify_erased` found nothing:

- the current files of the erased tables hold none of the plan's keys (`store.erasure.locate`
  finds no row; reading only the key columns is what keeps this fast on a large lake);
- every other file under the lake is searched for every needle (the plan's ids, the user or
  session id): Delta logs byte by byte, checkpoints and data files no version names (a
  writer's uncommitted file) decoded, the spool, the judge cache, the registry, anything else.

`files_holding` is the exhaustive form (every Parquet file decoded, whatever table it
belongs to): what the acceptance tests run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

import pyarrow.parquet as pq

from store.catalog import snapshot
from store.erasure import ErasurePlan, TableTarget, locate
from store.lake import Lake
from store.schema import TABLES

# The erasure's own plan (the ids it is removing), deleted once it is done.
SKIPPED_DIRS = ("_erasure",)


def needle_pattern(needles: Sequence[str]) -> re.Pattern[bytes] | None:
    """One regular expression finding any of `needles` in bytes (None when there are none)."""
    # Longest first, so that an id that is a prefix of another never hides it.
    escaped = [re.escape(n.encode()) for n in sorted(set(needles), key=len, reverse=True) if n]
    return re.compile(b"|".join(escaped)) if escaped else None


def _decoded(lake: Lake, path: str) -> bytes:
    """A Parquet file's values as JSON text (compressed pages hide them from a byte search)."""
    with lake.fs.open(path, "rb") as handle:
        table = pq.read_table(handle)
    return json.dumps(table.to_pylist(), default=str, ensure_ascii=False).encode()


def files_holding(lake: Lake, needles: Sequence[str], paths: Iterable[str] | None = None) -> list[str]:
    """The files (fsspec paths) among `paths` (default: every file under the lake) holding any
    of `needles`: Parquet decoded, everything else as bytes."""
    pattern = needle_pattern(needles)
    if pattern is None:
        return []
    found = []
    for path in paths if paths is not None else lake.fs.find(lake.fs_path()):
        path = str(path)
        if any(f"/{d}/" in path for d in SKIPPED_DIRS):
            continue
        data = _decoded(lake, path) if path.endswith(".parquet") else lake.fs.cat_file(path)
        if pattern.search(data):
            found.append(path)
    return found


def verify_erased(lake: Lake, plan: ErasurePlan) -> list[str]:
    """What still holds erased data after `plan` was carried out (empty: nothing)."""
    snap = snapshot(lake)
    problems = []
    current = set()
    for name, target in plan.targets.items():
        again = TableTarget(target.table, target.column, target.values, target.before_column, target.before)
        locate(lake, snap, again)
        if again.rows:
            problems.append(f"`{name}` still holds {again.rows} erased rows in {len(again.files)} files")
        current |= {_local(f) for f in snap[name].files}
    others = []
    for path in lake.fs.find(lake.fs_path()):
        path = str(path)
        under_table = next((t for t in TABLES if f"/{t}/" in path.removeprefix(lake.fs_path())), None)
        if under_table in plan.targets and "/_delta_log/" not in path and _local(path) in current:
            continue  # checked by key above
        others.append(path)
    problems += [f"`{p}` holds erased values" for p in files_holding(lake, plan.needles, others)]
    return problems


def _local(path: str) -> str:
    return path.removeprefix("file://")
