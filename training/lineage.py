"""Lineage: what a training set was made of, recorded so the exact rows can be read again.

Every selection (SFT conversations, GRPO groups) reads the lake at one snapshot and
returns a `Lineage`: the selection SQL, a digest of the trajectory ids, the Delta
version (and commit time) of every table the selection read, and the reward name and
scorers. Re-running the selection at those versions (`as_of`) gives the same rows,
whatever was re-assembled, re-scored or compacted since, as long as the versions' files
are kept: vacuum keeps them for the retention period, and for good once an adapter
trained on them is published (`training.registry.lineage_versions`). The run record
carries the lineage, and `publish` writes it into the manifest and the `adapters` row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from store.catalog.versions import Snapshot
from store.catalog.versions import snapshot as take_snapshot
from store.lake import Lake

# The tables a selection reads: its SQL may name any view, and the training rows join these.
READ_TABLES = ("trajectories", "rewards", "scenarios")


@dataclass(frozen=True)
class Lineage:
    """Where a training set came from: enough to read the exact rows again."""

    sql: str
    trajectory_count: int
    trajectory_ids_digest: str
    lake: str
    table_versions: dict[str, dict[str, Any]] = field(default_factory=dict)  # table -> version, timestamp
    reward_name: str | None = None
    reward_scorers: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, sql: str, ids: Sequence[str], lake: Lake, snapshot: Snapshot, **reward: Any) -> Lineage:
        """The lineage of the rows `ids` that `sql` selected from `snapshot` of `lake`."""
        return cls(
            sql=sql,
            trajectory_count=len(ids),
            trajectory_ids_digest=digest_ids(ids),
            lake=lake.url(),
            table_versions=versions_read(snapshot),
            **reward,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def digest_ids(ids: Sequence[str]) -> str:
    """Order-independent sha256 of a set of trajectory ids (`sha256:<hex>`).

    >>> digest_ids(["b", "a"]) == digest_ids(["a", "b"])
    True
    """
    h = hashlib.sha256()
    for tid in sorted(set(ids)):
        h.update(tid.encode())
        h.update(b"\n")
    return f"sha256:{h.hexdigest()}"


def selection_snapshot(lake: Lake, as_of: Mapping[str, int] | None = None) -> Snapshot:
    """The snapshot a selection reads: the lake now, or the table versions of an earlier lineage."""
    return take_snapshot(lake, dict(as_of or {}))


def versions_read(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """The lineage entry of a snapshot: version and commit time of each table a selection reads."""
    return {name: snapshot[name].lineage() for name in READ_TABLES if snapshot[name].version is not None}


def as_of_versions(lineage: Mapping[str, Any]) -> dict[str, int]:
    """`{table: version}` of a recorded lineage, to pass back as `as_of`."""
    return {
        name: int(entry["version"])
        for name, entry in (lineage.get("table_versions") or {}).items()
        if entry.get("version") is not None
    }
