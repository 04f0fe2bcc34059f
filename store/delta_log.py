"""A table's Delta log as files: which versions it still holds. Below the catalog and the
erasure code, which both ask (`DataErased` for a purged version; the purge itself)."""

from __future__ import annotations

from store.lake import Lake, log_version


def earliest_version(lake: Lake, table: str) -> int | None:
    """The oldest version of `table` that can still be read (its log starts there after an
    erasure purged the history before it); None for a table without a log."""
    versions = [v for v in map(log_version, lake.log_names(table)) if v is not None]
    return min(versions) if versions else None
