"""Forgetting and retention, wired: spools, lake, judge cache, adapters, audit, check.

The order is what makes a crash at any point safe to finish by running again:

1. the plan (ids only the lake can resolve) is saved under `<lake>/_erasure/`;
2. the collectors' spools drop the erased traces' rows (or flush them first), so nothing
   erased lands again after the lake is clean;
3. adapters trained on erased rows are marked, while the versions they read still exist;
4. the judge cache drops verdicts on erased conversations;
5. each table deletes its rows and loses its history (`store.erasure_apply`);
6. every file under the lake is checked (`store.erasure_check`); only then is the audit
   row written and the saved plan removed.

No data logic here: each step is a library function of the package that owns the data.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import store
from ingest.otlp.collector import default_spool_root
from ingest.otlp.spool.erase import count_in_spools, erase_from_spools, segment_as_json
from judging.ruler.cache import JudgeCache
from store.erasure import ErasurePlan, ErasureSelection, RetentionConfig, plan_erasure
from store.erasure_apply import TableErasure, apply_plan, drop_pending, pending_plans, save_pending
from store.erasure_check import verify_erased
from store.errors import StoreError
from training.erasure import (
    adapters_trained_on,
    mark_adapters,
    mark_run_records,
    run_records_trained_on,
)


class ErasureIncomplete(StoreError):
    """An erasure could not finish; its plan is kept and `trajlake forget` finishes it."""


@dataclass
class ErasureReport:
    """What one erasure did, in counts."""

    plan: ErasurePlan
    tables: list[TableErasure] = field(default_factory=list)
    spool_rows: int = 0
    cache_entries: int = 0
    adapters: list[str] = field(default_factory=list)
    run_records: list[str] = field(default_factory=list)  # unpublished adapters' folders marked
    verified: bool = False

    @property
    def files_rewritten(self) -> int:
        return sum(t.files_removed for t in self.tables)

    @property
    def bytes_written(self) -> int:
        return sum(t.bytes_written for t in self.tables)


def plan(
    lake: store.Lake, selection: ErasureSelection, *, reason: str = "forget", requested_by: str = ""
) -> tuple[ErasurePlan, list[str]]:
    """The plan of `selection` and the adapters it would mark (a dry run: nothing changes)."""
    erasure = plan_erasure(lake, selection, reason=reason, requested_by=requested_by)  # type: ignore[arg-type]
    erased = erasure.targets["trajectories"].values
    erasure.adapters = [f"{r['name']}:{r['version']}" for r in adapters_trained_on(lake, erased)]
    erasure.run_records = run_records_trained_on(lake, erased)
    return erasure, erasure.adapters


def spool_mentions(erasure: ErasurePlan) -> list[str]:
    """Values a spool row may name the erased user or session by (spans not in the lake yet)."""
    if erasure.selection_kind not in ("user_id", "session_id"):
        return []
    return [n for n in erasure.needles if n not in erasure.targets["spans"].values]


def derived_counts(lake: store.Lake, erasure: ErasurePlan) -> dict[str, int]:
    """What a dry run lists besides the tables' rows: spool rows and judge cache entries."""
    spool = 0
    if lake.is_local:
        spool = count_in_spools(
            default_spool_root(lake), erasure.targets["spans"].values, spool_mentions(erasure)
        )
    return {
        "spool_rows": spool,
        "judge_cache_entries": JudgeCache(lake).forget(erasure.needles, dry_run=True),
    }


def carry_out(
    lake: store.Lake,
    erasure: ErasurePlan,
    *,
    spool_wait_s: float = 30.0,
    on_step: Callable[[str], None] | None = None,
) -> ErasureReport:
    """Erase everything `erasure` names, check the lake, record the audit row."""
    step = on_step or (lambda _: None)
    report = ErasureReport(erasure)
    if erasure.adapters is None or erasure.run_records is None:
        # Before anything is erased: the versions their lineage read still exist. Kept in the
        # saved plan, so a resumed erasure marks the same ones.
        step("adapters")
        erasure.adapters = [
            f"{r['name']}:{r['version']}"
            for r in adapters_trained_on(lake, erasure.targets["trajectories"].values)
        ]
        erasure.run_records = run_records_trained_on(lake, erasure.targets["trajectories"].values)
    save_pending(lake, erasure)
    if lake.is_local:
        step("spools")
        spools = erase_from_spools(
            default_spool_root(lake),
            erasure.targets["spans"].values,
            spool_mentions(erasure),
            wait_s=spool_wait_s,
        )
        if spools.waiting:
            busy = ", ".join(f"`{d}` ({n} rows)" for d, n in spools.waiting.items())
            raise ErasureIncomplete(
                f"erasure `{erasure.erasure_id}`: live collectors still hold erased rows after {spool_wait_s:g} s: "
                f"{busy}; nothing was erased from the lake; rerun `trajlake forget` once they have flushed"
            )
        report.spool_rows = spools.rows_removed
    step("marking adapters")
    report.adapters = mark_adapters(lake, erasure.adapters, erasure.erasure_id)
    report.run_records = mark_run_records(erasure.run_records, erasure.erasure_id)
    step("judge cache")
    report.cache_entries = JudgeCache(lake).forget(erasure.needles)
    report.tables = apply_plan(lake, erasure, on_table=lambda t: step(f"`{t}`"))
    step("checking every file")
    problems = verify_erased(lake, erasure, decoders={".wal": segment_as_json})
    if problems:
        raise ErasureIncomplete(
            f"erasure `{erasure.erasure_id}` is not complete: "
            + "; ".join(problems[:5])
            + "; the plan is kept, "
            "rerun `trajlake forget` to finish"
        )
    report.verified = True
    store.write(lake, "erasures", [audit_row(report)])
    drop_pending(lake, erasure)
    return report


def audit_row(report: ErasureReport) -> dict[str, Any]:
    """The `erasures` row: counts and the selection's digest, never an erased value."""
    erasure = report.plan
    return {
        "erasure_id": erasure.erasure_id,
        "reason": erasure.reason,
        "requested_by": erasure.requested_by,
        "requested_at": datetime.fromisoformat(erasure.requested_at),
        "finished_at": store.utc_now(),
        "selection_kind": erasure.selection_kind,
        "selection_digest": erasure.selection_digest,
        "rows": json.dumps({t.table: t.rows_deleted for t in report.tables}),
        "files_rewritten": report.files_rewritten,
        "bytes_written": report.bytes_written,
        "derived": json.dumps(
            {
                "spool_rows": report.spool_rows,
                "judge_cache_entries": report.cache_entries,
                "unpublished_adapters_marked": len(report.run_records),
            }
        ),
        "adapters": report.adapters,
        "verified": report.verified,
    }


def finish_pending(lake: store.Lake, **options: Any) -> list[ErasureReport]:
    """Finish the erasures a killed `forget` left (their saved plans)."""
    return [carry_out(lake, erasure, **options) for erasure in pending_plans(lake)]


def apply_retention(lake: store.Lake, retention: RetentionConfig, **options: Any) -> ErasureReport | None:
    """Erase production data older than `retention.production_days` (None: nothing to erase)."""
    cutoff = retention.cutoff(store.utc_now())
    if cutoff is None:
        return None
    finish_pending(lake, **options)
    erasure, _ = plan(
        lake, ErasureSelection("older_than", cutoff.isoformat()), reason="retention", requested_by="retention"
    )
    return None if erasure.empty else carry_out(lake, erasure, **options)
