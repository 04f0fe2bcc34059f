"""Carrying an erasure plan out: delete the rows, then every older copy of them.

A Delta DELETE only hides rows from the newest version: the files that held them stay
for time travel until a VACUUM past the retention window, and the log keeps per-file
statistics (the id columns' min/max, `store.writer.stats_columns`) until log cleanup.
So for each table of the plan:

1. `delete_rows`: one MERGE of the erased keys with `WHEN MATCHED DELETE`, which rewrites
   only the files holding them. A MERGE, not a DELETE: delta-rs records a DELETE's
   predicate in the commit's `commitInfo`, literal ids included, while a MERGE records
   `t.id = s.id`.
2. `purge_history`: a checkpoint at the new version, the log before it removed
   (`cleanup_metadata` with `delta.logRetentionDuration` set to zero for the moment, then
   back), and the replaced files vacuumed at once (`enforce_retention_duration=False`).
   Files no version names (a writer killed between its Parquet file and its commit) are
   vacuumed too once they are an hour old; younger ones may be a live writer's next
   commit, so `store.erasure.verify` looks inside them instead.

Time travel to a version before the erasure is then impossible: `store.catalog.versions.snapshot` says
the data was erased (`DataErased`). Readers holding a snapshot opened just before a
purge can fail with a missing file; they succeed when run again.

The plan is saved under `<lake>/_erasure/` before the first delete and removed after the
audit row is written, so a `forget` killed at any point is finished by the next one
(`pending_plans`); every step is idempotent (a deleted key deletes nothing twice).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import pyarrow as pa

from store.erasure.plan import ERASED_TABLES, ErasurePlan, TableTarget, newest_write
from store.errors import StoreError
from store.lake import Lake
from store.schema import WRITTEN_AT, table_spec
from store.writer import open_table, retried

PENDING_DIR = "_erasure"
LOG_RETENTION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION = "interval 30 days"  # Delta's default, restored after a purge
# Files no commit names are vacuumed only past this age: a younger one may be a writer's
# file about to be committed (deleting it would lose rows that writer acknowledged).
UNCOMMITTED_GRACE_HOURS = 1
# Between the deletes and the vacuum: a query that opened the previous versions a moment
# before reads their files meanwhile (a longer one can still fail, and succeeds when rerun).
READER_GRACE_S = 2.0


@dataclass
class TableErasure:
    """What an erasure did to one table."""

    table: str
    rows_deleted: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_written: int = 0
    files_vacuumed: int = 0
    log_files_removed: int = 0
    version: int | None = None


COUNTS = (
    "rows_deleted",
    "files_removed",
    "files_added",
    "bytes_written",
    "files_vacuumed",
    "log_files_removed",
)


def save_pending(lake: Lake, plan: ErasurePlan) -> str:
    """Write the plan where a re-run finds it (written whole: temporary name, then rename)."""
    path = lake.fs_path(PENDING_DIR, f"{plan.erasure_id}.json")
    lake.fs.makedirs(lake.fs_path(PENDING_DIR), exist_ok=True)
    if lake.is_local:
        temp = f"{path}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(plan.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    else:
        lake.fs.pipe_file(path, plan.to_json().encode())
    return path


def pending_plans(lake: Lake) -> list[ErasurePlan]:
    """Plans of erasures that started and did not finish, oldest first."""
    root = lake.fs_path(PENDING_DIR)
    if not lake.fs.exists(root):
        return []
    paths = sorted(p for p in lake.fs.ls(root, detail=False) if str(p).endswith(".json"))
    return [ErasurePlan.from_json(lake.fs.cat_file(p).decode()) for p in paths]


def drop_pending(lake: Lake, plan: ErasurePlan) -> None:
    path = lake.fs_path(PENDING_DIR, f"{plan.erasure_id}.json")
    if lake.fs.exists(path):
        lake.fs.rm(path)


def delete_rows(lake: Lake, target: TableTarget) -> TableErasure:
    """Remove `target`'s rows from the table's current version (one MERGE, and one DELETE by
    age for retention); returns the commit's counts."""
    outcome = TableErasure(target.table)
    if not lake.has_table(target.table):
        return outcome
    spec = table_spec(target.table)
    newest = newest_write(lake, target)
    if newest is not None:  # None: no row of these keys is left (a re-run)
        keys = pa.table({target.column: pa.array(target.values, pa.string())})
        bound = newest.astimezone(UTC).isoformat().replace("+00:00", "Z")
        predicate = f"t.{WRITTEN_AT} <= '{bound}' AND t.{target.column} = s.{target.column}"

        def merge() -> dict[str, Any]:
            table = open_table(lake, spec)
            result: dict[str, Any] = (
                table.merge(keys, predicate, source_alias="s", target_alias="t")
                .when_matched_delete()
                .execute()
            )
            return result

        metrics, _ = retried(merge, _gave_up(target.table))
        outcome.rows_deleted += int(metrics.get("num_target_rows_deleted", 0))
        outcome.files_removed += int(metrics.get("num_target_files_removed", 0))
        outcome.files_added += int(metrics.get("num_target_files_added", 0))
    if target.before_column and target.before:
        predicate = f"{target.before_column} < '{target.before}'"

        def delete() -> dict[str, Any]:
            result: dict[str, Any] = open_table(lake, spec).delete(predicate)
            return result

        metrics, _ = retried(delete, _gave_up(target.table))
        outcome.rows_deleted += int(metrics.get("num_deleted_rows", 0))
        outcome.files_removed += int(metrics.get("num_removed_files", 0))
        outcome.files_added += int(metrics.get("num_added_files", 0))
    outcome.bytes_written = _bytes_added_since(lake, target.table, outcome.files_added)
    return outcome


def _gave_up(table: str) -> Callable[[int, Exception], StoreError]:
    return lambda attempts, exc: StoreError(
        f"erasing from `{table}`: the commit lost {attempts} races with writers ({exc}); "
        "rerun `trajlake forget` to finish (the plan is kept under `_erasure/`)"
    )


def _bytes_added_since(lake: Lake, table: str, files_added: int) -> int:
    """Bytes of the files the last commits added (the rewrite's output)."""
    if not files_added:
        return 0
    delta = open_table(lake, table_spec(table))
    actions = pa.table(delta.get_add_actions(flatten=True))
    newest = actions.sort_by([("modification_time", "descending")]).slice(0, files_added)
    return int(sum(newest.column("size_bytes").to_pylist()))


def purge_history(lake: Lake, table: str, outcome: TableErasure | None = None) -> TableErasure:
    """Leave `table` with its current version only: checkpoint it, remove the log before the
    checkpoint and vacuum every file the current version does not name."""
    from deltalake import DeltaTable

    outcome = outcome or TableErasure(table)
    if not lake.has_table(table):
        return outcome
    uri = lake.table_uri(table)
    log_before = set(lake.log_names(table))

    def set_log_retention(value: str) -> None:
        DeltaTable(uri, storage_options=lake.delta_options).alter.set_table_properties({LOG_RETENTION: value})

    retried(lambda: set_log_retention("interval 0 seconds"), _gave_up(table))
    delta = DeltaTable(uri, storage_options=lake.delta_options)
    delta.create_checkpoint()
    delta.cleanup_metadata()
    retried(lambda: set_log_retention(DEFAULT_LOG_RETENTION), _gave_up(table))
    outcome.log_files_removed = len(log_before - set(lake.log_names(table)))
    delta = DeltaTable(uri, storage_options=lake.delta_options)
    removed = delta.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    removed += DeltaTable(uri, storage_options=lake.delta_options).vacuum(
        retention_hours=UNCOMMITTED_GRACE_HOURS, dry_run=False, enforce_retention_duration=False, full=True
    )
    outcome.files_vacuumed = len(set(removed))
    outcome.version = DeltaTable(uri, storage_options=lake.delta_options).version()
    return outcome


def delete_all(
    lake: Lake, plan: ErasurePlan, on_table: Callable[[str], None] | None = None
) -> list[TableErasure]:
    """Delete the plan's rows from every table (in `ERASED_TABLES` order): the deletes of one pass."""
    outcomes = []
    for name in ERASED_TABLES:
        target = plan.targets.get(name)
        if target is None:
            continue
        if on_table is not None:
            on_table(name)
        outcomes.append(delete_rows(lake, target))
    return outcomes


def purge_all(
    lake: Lake, tables: Sequence[str], *, reader_grace_s: float = READER_GRACE_S
) -> list[TableErasure]:
    """Wait `reader_grace_s` (queries that opened the previous versions read their files
    meanwhile), then purge each table's history."""
    time.sleep(reader_grace_s)
    return [purge_history(lake, table) for table in tables]


def apply_plan(
    lake: Lake,
    plan: ErasurePlan,
    *,
    reader_grace_s: float = READER_GRACE_S,
    on_table: Callable[[str], None] | None = None,
) -> list[TableErasure]:
    """Delete the plan's rows from every table, wait `reader_grace_s`, then purge each table's
    history (the wait lets queries that opened the previous versions read their files)."""
    outcomes = delete_all(lake, plan, on_table)
    if on_table is not None:
        on_table("history")
    time.sleep(reader_grace_s)
    return [purge_history(lake, outcome.table, outcome) for outcome in outcomes]


def add_counts(total: TableErasure, more: TableErasure) -> None:
    """Add `more`'s counts into `total` (one table's passes summed); the newest version wins."""
    for name in COUNTS:
        setattr(total, name, getattr(total, name) + getattr(more, name))
    total.version = more.version if more.version is not None else total.version
