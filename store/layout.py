"""How files are named inside a table, and what each kind of name promises.

Two kinds of committed files live side by side in a table's (partition) directories:

- `part-<time>-<random>.parquet`: written by `store.write`. No promise: a key may repeat
  inside it and across files (re-ingestion, retries, updates).
- `compact-<generation>-<random>.parquet`: written by `store.compact`. Within one table,
  the *live* compacted files hold every key at most once, and never a row that any other
  live compacted file supersedes. A compacted file is live when its generation is the
  highest among the compacted files of its directory; a newer generation in the same
  directory replaces the older ones atomically (the older files stay on disk for a grace
  period so that queries already running can finish, then compaction deletes them).

The views rely on this split: rows of live compacted files need no deduplication
among themselves, so a compacted lake is read at the speed of plain Parquet, and only
the (usually small) set of `part-` rows is deduplicated and compared against them.

Any other `*.parquet` file in a table (written by another tool) is treated like a
`part-` file. Temporaries are hidden (`.<name>.tmp`) and never match `*.parquet`.
"""

from __future__ import annotations

import re
import time
import uuid

PART_PREFIX = "part-"
COMPACT_PREFIX = "compact-"
TEMP_SUFFIX = ".tmp"

_COMPACT_RE = re.compile(r"^compact-(\d+)-[0-9a-f]+\.parquet$")


def new_part_name() -> str:
    """Sortable by creation time, unique across threads and processes."""
    return f"{PART_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:16]}.parquet"


def new_compact_name(generation: int) -> str:
    """Name of a compacted file of `generation` (zero-padded so names sort by generation)."""
    return f"{COMPACT_PREFIX}{generation:020d}-{uuid.uuid4().hex[:16]}.parquet"


def temp_name(final_name: str) -> str:
    """The hidden name a file is written under before its atomic rename to `final_name`."""
    return f".{final_name}{TEMP_SUFFIX}"


def compact_generation(name: str) -> int | None:
    """The generation of a compacted file's base name, or None for any other file."""
    match = _COMPACT_RE.match(name)
    return int(match.group(1)) if match else None


def base_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def dir_name(path: str) -> str:
    return path.rsplit("/", 1)[0]
