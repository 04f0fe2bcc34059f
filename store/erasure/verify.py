"""Checking an erasure: no file under the lake may still hold an erased value.

`forget` says the data is gone only after `verify_erased` found nothing:

- the current files of the erased tables hold none of the plan's keys (`store.erasure.plan.locate`
  finds no row; reading only the key columns is what keeps this fast on a large lake), and
  for a user or session no row names it any more (`store.erasure.plan.identity_rows`: found again
  from the selection, its JSON decoded, so rows that arrived after the plan count too);
- every other file under the lake is searched for every needle (the plan's ids, the user or
  session id) in every spelling the lake's writers use (`encodings`: raw UTF-8, `\\u`
  escapes, JSON inside JSON): Delta logs byte by byte, checkpoints and data files no version names (a
  writer's uncommitted file) decoded, the spool, the judge cache, the registry, anything else.

`files_holding` is the exhaustive form (every Parquet file decoded, whatever table it
belongs to): what the acceptance tests run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from store.catalog import snapshot
from store.erasure.plan import ErasurePlan, TableTarget, identity_rows, locate
from store.lake import Lake
from store.schema import TABLES

# The erasure's own plan (the ids it is removing), deleted once it is done.
SKIPPED_DIRS = ("_erasure",)


# Turns a file's bytes into text where its values can be searched (a compressed or binary
# format), by file name suffix: Parquet here; other packages add their own (the spool's).
Decoder = Callable[[bytes], bytes]


def encodings(needle: str) -> list[str]:
    """The spellings of `needle` a file under the lake may hold: raw UTF-8 (orjson, delta-rs,
    Arrow), JSON-escaped with lower- and upper-case `\\u` escapes (`json.dumps`, other clients),
    and each of these once more escaped (JSON text inside a JSON string: an attribute column
    decoded to JSON, a Delta log's statistics).

    >>> encodings("u-55")  # plain ASCII has one spelling
    ['u-55']
    """
    raw = json.dumps(needle, ensure_ascii=False)[1:-1]
    lower = json.dumps(needle)[1:-1]
    upper = re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), lower)
    forms = {needle, raw, lower, upper}
    return sorted(forms | {f.replace("\\", "\\\\") for f in forms})


def needle_pattern(needles: Sequence[str], *, whole_values: bool = False) -> re.Pattern[bytes] | None:
    """One regular expression finding any of `needles`, in any of its `encodings`, in bytes
    (None when there are none).

    `whole_values`: match a needle only as a whole JSON string value (`"u-12"`, not the `u-12`
    inside `u-123` or inside someone's message), at any depth of JSON-in-JSON (`\\"u-12\\"`):
    ids are searched so, in files where every value is JSON text (logs, caches) or decoded to it.
    """
    texts = sorted({e for n in needles if n for e in encodings(n)}, key=len, reverse=True)
    if not texts:
        return None
    # Longest first, so that a needle that is a prefix of another never hides it.
    alternatives = b"|".join(re.escape(t.encode()) for t in texts)
    if whole_values:
        return re.compile(rb'(?:\\)*"(?:' + alternatives + rb')(?:\\)*"')
    return re.compile(alternatives)


def parquet_as_json(data: bytes) -> bytes:
    """A Parquet file's values as JSON text (compressed pages hide them from a byte search)."""
    table = pq.read_table(pa.BufferReader(data))
    return json.dumps(table.to_pylist(), default=str).encode()


DECODERS: dict[str, Decoder] = {".parquet": parquet_as_json}


def files_holding(
    lake: Lake,
    needles: Sequence[str],
    paths: Iterable[str] | None = None,
    *,
    whole_values: bool = False,
    decoders: Mapping[str, Decoder] | None = None,
) -> list[str]:
    """The files (fsspec paths) among `paths` (default: every file under the lake) holding any
    of `needles`: Parquet (and what `decoders` name by suffix) decoded to JSON text, every
    other file as its bytes. `whole_values`: see `needle_pattern`."""
    pattern = needle_pattern(needles, whole_values=whole_values)
    if pattern is None:
        return []
    known = {**DECODERS, **(decoders or {})}
    found = []
    for path in paths if paths is not None else lake.fs.find(lake.fs_path()):
        path = str(path)
        if any(f"/{d}/" in path for d in SKIPPED_DIRS):
            continue
        try:
            data = lake.fs.cat_file(path)
        except FileNotFoundError:
            continue  # removed since it was listed (a writer that lost its commit cleaned up): holds nothing
        decode = next((d for suffix, d in known.items() if path.endswith(suffix)), None)
        if pattern.search(decode(data) if decode else data):
            found.append(path)
    return found


def verify_erased(lake: Lake, plan: ErasurePlan, decoders: Mapping[str, Decoder] | None = None) -> list[str]:
    """What still holds erased data after `plan` was carried out (empty: nothing). Ids are
    searched as whole values; `decoders`: the formats other packages keep under the lake."""
    snap = snapshot(lake)
    problems = []
    current = set()
    for name, target in plan.targets.items():
        again = TableTarget(target.table, target.column, target.values, target.before_column, target.before)
        locate(lake, snap, again)
        if again.rows:
            problems.append(f"`{name}` still holds {again.rows} erased rows in {len(again.files)} files")
        current |= {_local(f) for f in snap[name].files}
    if plan.selection_kind in ("user_id", "session_id") and plan.selection_value:
        # Found again from the selection, not from the plan's ids: rows that arrived after the
        # plan, or that a plan missed, are the user's all the same.
        for name, rows in identity_rows(lake, snap, plan.selection_kind, plan.selection_value).items():
            if rows:
                problems.append(f"`{name}` still holds {rows} rows naming the {plan.selection_kind}")
    others = []
    for path in lake.fs.find(lake.fs_path()):
        path = str(path)
        under_table = next((t for t in TABLES if f"/{t}/" in path.removeprefix(lake.fs_path())), None)
        if under_table in plan.targets and "/_delta_log/" not in path and _local(path) in current:
            continue  # checked by key above
        others.append(path)
    leftovers = files_holding(lake, plan.needles, others, whole_values=True, decoders=decoders)
    problems += [f"`{p}` holds erased values" for p in leftovers]
    return problems


def _local(path: str) -> str:
    return path.removeprefix("file://")
