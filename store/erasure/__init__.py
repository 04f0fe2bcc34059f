"""Erasure: `trajlake forget` and retention, one module per step.

- `plan`: which rows a selection (a user, a session, a trace, a SQL condition, an age)
  reaches, across every table derived from the conversations, and the ids no file may
  hold afterwards (`ErasureSelection`, `plan_erasure`, `RetentionConfig`); planning only reads;
- `apply`: carrying a plan out, the rows deleted and every older copy of them purged
  from the Delta history, with the plan kept under `<lake>/_erasure/` until it is done
  (`delete_all`, `purge_all`, `pending_plans`);
- `verify`: every file under the lake searched for every erased value in every spelling
  the lake's writers use (`verify_erased`, `files_holding`).

`flows.stages.forget` runs the three in that order. The names below are the package's
surface; each module documents its own step.
"""

from __future__ import annotations

from store.erasure.apply import (
    COUNTS,
    PENDING_DIR,
    UNCOMMITTED_GRACE_HOURS,
    TableErasure,
    add_counts,
    apply_plan,
    delete_all,
    delete_rows,
    drop_pending,
    pending_plans,
    purge_all,
    purge_history,
    save_pending,
)
from store.erasure.plan import (
    ERASED_TABLES,
    ErasurePlan,
    ErasureSelection,
    RetentionConfig,
    TableTarget,
    identity_rows,
    identity_spans,
    locate,
    new_erasure_id,
    newest_write,
    plan_erasure,
    plan_summary,
)
from store.erasure.verify import encodings, files_holding, needle_pattern, verify_erased

__all__ = [
    "COUNTS",
    "ERASED_TABLES",
    "PENDING_DIR",
    "UNCOMMITTED_GRACE_HOURS",
    "ErasurePlan",
    "ErasureSelection",
    "RetentionConfig",
    "TableErasure",
    "TableTarget",
    "add_counts",
    "apply_plan",
    "delete_all",
    "delete_rows",
    "drop_pending",
    "encodings",
    "files_holding",
    "identity_rows",
    "identity_spans",
    "locate",
    "needle_pattern",
    "new_erasure_id",
    "newest_write",
    "pending_plans",
    "plan_erasure",
    "plan_summary",
    "purge_all",
    "purge_history",
    "save_pending",
    "verify_erased",
]
