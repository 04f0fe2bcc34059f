"""Forgetting and retention, wired: spools, lake, judge cache, adapters, audit, check.

The order is what makes a crash at any point safe to finish by running again:

1. the plan (ids only the lake can resolve) is saved under `<lake>/_erasure/`;
2. the collectors' spools drop the erased traces' rows (or flush them first), so nothing
   erased lands again after the lake is clean;
3. adapters trained on erased rows are marked, while the versions they read still exist;
4. the judge cache drops verdicts on erased conversations;
5. each table deletes its rows (`store.erasure.apply`); the selection is planned again and
   what arrived meanwhile (a collector's new spans of the user) is deleted by another pass;
   then each table loses its history;
6. every file under the lake is checked (`store.erasure.verify`); only then is the audit
   row written and the saved plan removed.

No data logic here: each step is a library function of the package that owns the data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.otlp.collector import default_spool_root
from ingest.otlp.spool.erase import count_in_spools, erase_from_spools, segment_as_json
from judging.ruler.cache import JudgeCache
from store.erasure.apply import (
    COUNTS,
    TableErasure,
    add_counts,
    delete_all,
    drop_pending,
    pending_plans,
    purge_all,
    save_pending,
)
from store.erasure.plan import ERASED_TABLES, ErasurePlan, ErasureSelection, plan_erasure
from store.erasure.retention import RetentionConfig
from store.erasure.verify import verify_erased
from store.errors import StoreError
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from training.erasure import (
    adapters_trained_on,
    mark_adapters,
    mark_run_records,
    run_records_trained_on,
)

# Passes of deletes an erasure makes at most while collectors keep bringing the user's spans.
MAX_PASSES = 5
DERIVED = "derived"  # the saved plan's progress entry of the spool and judge-cache counts


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
    lake: Lake, selection: ErasureSelection, *, reason: str = "forget", requested_by: str = ""
) -> tuple[ErasurePlan, list[str]]:
    """The plan of `selection` and the adapters it would mark (a dry run: nothing changes)."""
    erasure = plan_erasure(lake, selection, reason=reason, requested_by=requested_by)  # type: ignore[arg-type]
    _add_adapters(lake, erasure, erasure.targets["trajectories"].values)
    return erasure, erasure.adapters or []


def spool_identity(erasure: ErasurePlan) -> tuple[str, str] | None:
    """The user or session whose spooled spans go too (spans not in the lake yet)."""
    if erasure.selection_kind not in ("user_id", "session_id") or not erasure.selection_value:
        return None
    return erasure.selection_kind, erasure.selection_value


def derived_counts(lake: Lake, erasure: ErasurePlan) -> dict[str, int]:
    """What a dry run lists besides the tables' rows: spool rows and judge cache entries."""
    spool = 0
    if lake.is_local:
        spool = count_in_spools(
            default_spool_root(lake), erasure.targets["spans"].values, spool_identity(erasure)
        )
    return {
        "spool_rows": spool,
        "judge_cache_entries": JudgeCache(lake).forget(erasure.needles, dry_run=True),
    }


def carry_out(
    lake: Lake,
    erasure: ErasurePlan,
    *,
    spool_wait_s: float = 30.0,
    on_step: Callable[[str], None] | None = None,
    max_passes: int = MAX_PASSES,
) -> ErasureReport:
    """Erase everything `erasure` names, check the lake, record the audit row.

    Collectors keep committing meanwhile: a user's spans that arrive while the erasure runs
    are found by planning the selection again after each pass's deletes (and by the check,
    which looks for the user, not for the plan's ids); they are erased by a further pass, up
    to `max_passes`. History is purged once nothing new arrived. The audit row counts every
    pass, those of an earlier run that was interrupted included (the saved plan keeps them)."""
    step = on_step or (lambda _: None)
    report = ErasureReport(erasure)
    if erasure.adapters is None or erasure.run_records is None:
        # Before anything is erased: the versions their lineage read still exist. Kept in the
        # saved plan, so a resumed erasure marks the same ones.
        step("adapters")
        erasure.adapters, erasure.run_records = [], []
        _add_adapters(lake, erasure, erasure.targets["trajectories"].values)
    save_pending(lake, erasure)
    totals = {
        name: TableErasure(name, **counts)
        for name, counts in erasure.progress.items()
        if name in ERASED_TABLES
    }
    derived = erasure.progress.setdefault(DERIVED, {"spool_rows": 0, "judge_cache_entries": 0})
    for attempt in range(1, max_passes + 1):
        derived["spool_rows"] += _erase_spools(lake, erasure, spool_wait_s, step)
        step("marking adapters")
        report.adapters = mark_adapters(lake, erasure.adapters or [], erasure.erasure_id)
        report.run_records = mark_run_records(erasure.run_records or [], erasure.erasure_id)
        step("judge cache")
        derived["judge_cache_entries"] += JudgeCache(lake).forget(erasure.needles)
        for outcome in delete_all(lake, erasure, on_table=lambda t: step(f"`{t}`")):
            add_counts(totals.setdefault(outcome.table, TableErasure(outcome.table)), outcome)
        _save_progress(lake, erasure, totals)
        step("looking for what arrived meanwhile")
        if _take_in_arrivals(lake, erasure) and attempt < max_passes:
            continue  # delete those too before purging history
        step("history")
        for outcome in purge_all(lake, [t for t in ERASED_TABLES if t in totals]):
            add_counts(totals[outcome.table], outcome)
        _save_progress(lake, erasure, totals)
        step("checking every file")
        problems = verify_erased(lake, erasure, decoders={".wal": segment_as_json})
        if not problems:
            break
        if attempt == max_passes:
            raise ErasureIncomplete(
                f"erasure `{erasure.erasure_id}` is not complete after {max_passes} passes: "
                + "; ".join(problems[:5])
                + "; the plan is kept, rerun `trajlake forget` to finish"
            )
        _take_in_arrivals(lake, erasure)
    report.tables = [totals[name] for name in ERASED_TABLES if name in totals]
    report.spool_rows, report.cache_entries = derived["spool_rows"], derived["judge_cache_entries"]
    report.verified = True
    write(lake, "erasures", [audit_row(report)])
    drop_pending(lake, erasure)
    return report


def _add_adapters(lake: Lake, erasure: ErasurePlan, trajectory_ids: Sequence[str]) -> None:
    """Add the adapters (and unpublished run records) trained on `trajectory_ids` to the plan."""
    found = [f"{r['name']}:{r['version']}" for r in adapters_trained_on(lake, trajectory_ids)]
    erasure.adapters = sorted({*(erasure.adapters or []), *found})
    erasure.run_records = sorted(
        {*(erasure.run_records or []), *run_records_trained_on(lake, trajectory_ids)}
    )


def _erase_spools(lake: Lake, erasure: ErasurePlan, wait_s: float, step: Callable[[str], None]) -> int:
    """Spool rows removed; raises `ErasureIncomplete` when live collectors keep erased rows."""
    if not lake.is_local:
        return 0
    step("spools")
    spools = erase_from_spools(
        default_spool_root(lake), erasure.targets["spans"].values, spool_identity(erasure), wait_s=wait_s
    )
    if spools.waiting:
        busy = ", ".join(f"`{d}` ({n} rows)" for d, n in spools.waiting.items())
        raise ErasureIncomplete(
            f"erasure `{erasure.erasure_id}`: live collectors still hold erased rows after {wait_s:g} s: "
            f"{busy}; rerun `trajlake forget` once they have flushed (the plan is kept)"
        )
    return spools.rows_removed


def _save_progress(lake: Lake, erasure: ErasurePlan, totals: dict[str, TableErasure]) -> None:
    for name, total in totals.items():
        erasure.progress[name] = {count: getattr(total, count) for count in COUNTS}
    save_pending(lake, erasure)


def _take_in_arrivals(lake: Lake, erasure: ErasurePlan) -> bool:
    """Plan the selection again and merge what it reaches now into `erasure` (rows that arrived
    after the plan, or that a concurrent writer committed past a delete's bound); True when
    rows are left to delete."""
    if not erasure.selection_value:  # a plan saved by an older release: its ids only
        return False
    selection = ErasureSelection(erasure.selection_kind, erasure.selection_value)
    fresh = plan_erasure(lake, selection, reason=erasure.reason, requested_by=erasure.requested_by)
    if fresh.empty:
        return False
    known = set(erasure.targets["trajectories"].values)
    for name, target in fresh.targets.items():
        mine = erasure.targets[name]
        mine.values = sorted({*mine.values, *target.values})
    erasure.needles = sorted({*erasure.needles, *fresh.needles})
    new_conversations = [t for t in fresh.targets["trajectories"].values if t not in known]
    if new_conversations:
        _add_adapters(lake, erasure, new_conversations)
    save_pending(lake, erasure)
    return True


def audit_row(report: ErasureReport) -> dict[str, Any]:
    """The `erasures` row: counts and the selection's digest, never an erased value."""
    erasure = report.plan
    return {
        "erasure_id": erasure.erasure_id,
        "reason": erasure.reason,
        "requested_by": erasure.requested_by,
        "requested_at": datetime.fromisoformat(erasure.requested_at),
        "finished_at": utc_now(),
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


def finish_pending(lake: Lake, **options: Any) -> list[ErasureReport]:
    """Finish the erasures a killed `forget` left (their saved plans)."""
    return [carry_out(lake, erasure, **options) for erasure in pending_plans(lake)]


def apply_retention(lake: Lake, retention: RetentionConfig, **options: Any) -> ErasureReport | None:
    """Erase production data older than `retention.production_days` (None: nothing to erase)."""
    cutoff = retention.cutoff(utc_now())
    if cutoff is None:
        return None
    finish_pending(lake, **options)
    erasure, _ = plan(
        lake, ErasureSelection("older_than", cutoff.isoformat()), reason="retention", requested_by="retention"
    )
    return None if erasure.empty else carry_out(lake, erasure, **options)
