"""Erasure plans: which rows of the lake a `forget` selection, or the retention window, reaches.

A selection picks conversations (trajectories, by user, session, trace, a SQL condition or
an age); everything derived from them goes with them:

    trajectories --trace_id--> spans, ingest_errors        (the raw telemetry and its failures)
         |  \\-trajectory_id--> rewards                    (judge verdicts, user feedback)
         |  \\-trajectory_id, trace_id, user_id--> labels   (corrections, imported answers)
         \\--source_trajectory_id--> scenarios --scenario_id--> replay trajectories --> their rewards

A user's or session's traces are those whose spans name the id under an identity key
(`store.identity`: `user.id`, `enduser.id`, `session.id`, `langfuse.user.id`, ...), compared
decoded whatever the JSON encoding; such a trace goes whole (its spans, its conversations,
its ingest errors) even when it never assembled. A span that only mentions the id in another
attribute (`app.target_user`) does not make the trace the user's. For retention, spans go by
their age. The plan names each table's rows by one
column and the values it must not hold any more (`TableTarget`), the files holding them
and their size, and the `needles`: every id (and the user or session id) that no file
of the lake may contain once the erasure is done (`store.erasure.verify`).

Planning only reads; `store.erasure.apply` carries a plan out. The plan of an erasure in
progress is kept under `<lake>/_erasure/` until it is done (so a killed `forget` resumes
with the ids it had found), and removed then: the audit row (`erasures`) keeps the
selection's kind and digest, never its value.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, get_args

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from store.catalog import Snapshot, check_selection, connect, snapshot, table_version
from store.errors import SelectionError
from store.identity import identity_sql
from store.lake import Lake
from store.rows import utc_now
from store.schema import WRITTEN_AT
from store.vocabulary import PRODUCTION_SOURCES, ErasureReason, SelectionKind, one_of

# Tables in the order an erasure rewrites them: derived rows first, the conversations last,
# so a plan interrupted half-way still finds its roots if it had to be made again.
ERASED_TABLES = ("labels", "rewards", "scenarios", "ingest_errors", "spans", "trajectories")


@dataclass(frozen=True)
class ErasureSelection:
    """What to erase: `kind` and its `value` (an id, a SQL condition over `trajectories`, or
    for `older_than` an ISO-8601 UTC time: production data that started before it)."""

    kind: SelectionKind
    value: str

    def __post_init__(self) -> None:
        if self.kind not in get_args(SelectionKind):
            raise ValueError(
                f"unknown selection `{self.kind}`; use one of {', '.join(get_args(SelectionKind))}"
            )
        if not self.value.strip():
            raise ValueError(f"the `{self.kind}` to erase is empty")
        if self.kind == "older_than":
            cutoff = datetime.fromisoformat(self.value)
            if cutoff.tzinfo is None:
                raise ValueError(f"`older_than` `{self.value}` needs a time zone (UTC: `...+00:00`)")

    def digest(self) -> str:
        """`sha256:<hex>` of the selection: what the audit keeps instead of the value."""
        return "sha256:" + hashlib.sha256(f"{self.kind}\n{self.value}".encode()).hexdigest()


@dataclass
class TableTarget:
    """The rows of one table an erasure removes: `column` IN `values`, and (retention) the rows
    whose `before_column` is older than `before`."""

    table: str
    column: str
    values: list[str] = field(default_factory=list)
    before_column: str | None = None
    before: str | None = None  # ISO time
    rows: int = 0
    files: list[str] = field(default_factory=list)  # paths relative to the table folder
    bytes: int = 0  # size of those files: what a rewrite reads

    @property
    def empty(self) -> bool:
        return not self.rows


@dataclass
class ErasurePlan:
    """One erasure: its audit fields, each table's rows, and the values no file may keep."""

    erasure_id: str
    reason: ErasureReason
    selection_kind: SelectionKind
    selection_digest: str
    requested_by: str
    requested_at: str  # ISO time
    targets: dict[str, TableTarget] = field(default_factory=dict)
    needles: list[str] = field(default_factory=list)
    # Found before anything is erased (their lineage versions still exist), filled by the
    # caller that knows adapters: `name:version` rows and run-record paths to mark.
    adapters: list[str] | None = None
    run_records: list[str] | None = None
    # The selection's value, so that a pass can find what arrived meanwhile (kept in the saved
    # plan only, which holds the value among its needles anyway; never in the audit row).
    selection_value: str = ""
    # Why rows were chosen: `table.column` or `spans.attributes."user.id"` -> rows (and traces).
    matched: dict[str, dict[str, int]] = field(default_factory=dict)
    # What the passes done so far removed, per table (`TableErasure` counts): a resumed or
    # repeated erasure records the sum of all of them in its audit row.
    progress: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def rows(self) -> dict[str, int]:
        return {name: t.rows for name, t in self.targets.items()}

    @property
    def empty(self) -> bool:
        return not any(self.rows.values())

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ErasurePlan:
        raw = json.loads(text)
        raw["targets"] = {name: TableTarget(**t) for name, t in raw["targets"].items()}
        return cls(**raw)


def new_erasure_id(reason: str) -> str:
    return f"{reason}-{utc_now().strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def plan_erasure(
    lake: Lake | str | os.PathLike[str],
    selection: ErasureSelection,
    *,
    reason: ErasureReason = "forget",
    requested_by: str = "",
) -> ErasurePlan:
    """Find everything `selection` reaches in the lake's current tables (reads only).

    Raises `SelectionError` when a `where` condition cannot run over `trajectories`.
    """
    lake = Lake.of(lake)
    snap = snapshot(lake)
    con = connect(lake, snapshot=snap)
    matched: dict[str, dict[str, int]] = {}
    try:
        selected = _selected(con, selection)
        if selection.kind in ("user_id", "session_id"):
            matched[f"trajectories.{selection.kind}"] = {"rows": selected.num_rows}
        traces = set(selected.column("trace_id").drop_null().to_pylist())
        traces |= _loose_traces(con, selection, matched)
        conversations = set(selected.column("trajectory_id").to_pylist())
        # A trace that is the user's goes whole: every conversation assembled from it too.
        conversations |= _ids(
            con,
            "SELECT trajectory_id FROM trajectories WHERE trace_id IN (SELECT v FROM ids)",
            traces - set(selected.column("trace_id").drop_null().to_pylist()),
        )
        scenarios = _ids(
            con,
            "SELECT scenario_id FROM scenarios WHERE source_trajectory_id IN (SELECT v FROM ids)",
            conversations,
        )
        replays = _ids(
            con, "SELECT trajectory_id FROM trajectories WHERE scenario_id IN (SELECT v FROM ids)", scenarios
        )
        labels = _labelled(con, selection, conversations, traces)
    finally:
        con.close()
    trajectories = sorted(conversations | replays)
    plan = ErasurePlan(
        erasure_id=new_erasure_id(reason),
        reason=reason,
        selection_kind=selection.kind,
        selection_digest=selection.digest(),
        requested_by=requested_by,
        requested_at=utc_now().isoformat(),
        selection_value=selection.value,
        matched=matched,
        targets={
            "labels": TableTarget("labels", "trajectory_id", sorted(labels)),
            "rewards": TableTarget("rewards", "trajectory_id", trajectories),
            "scenarios": TableTarget("scenarios", "scenario_id", sorted(scenarios)),
            "ingest_errors": TableTarget("ingest_errors", "trace_id", sorted(traces)),
            "spans": TableTarget("spans", "trace_id", sorted(traces)),
            "trajectories": TableTarget("trajectories", "trajectory_id", trajectories),
        },
    )
    if selection.kind == "older_than":  # spans that never assembled age out too
        plan.targets["spans"].before_column, plan.targets["spans"].before = "start_time", selection.value
    for target in plan.targets.values():
        locate(lake, snap, target)
    plan.needles = sorted(
        {*trajectories, *traces, *scenarios, *labels}
        | ({selection.value} if selection.kind in ("user_id", "session_id", "trace_id") else set())
    )
    return plan


def _selected(con: duckdb.DuckDBPyConnection, selection: ErasureSelection) -> pa.Table:
    """The selected conversations: `trajectory_id`, `trace_id` (production and replay alike)."""
    columns = "SELECT trajectory_id, trace_id FROM trajectories"
    if selection.kind == "where":
        sql = f"{columns} WHERE ({selection.value})"
        try:
            text, _ = check_selection(con, sql, "trajectory_id")
        except SelectionError as exc:
            raise SelectionError(
                f"--where `{selection.value}` is not a condition over `trajectories`: {exc}",
                sql=selection.value,
                reason=exc.reason,
            ) from None
        # Only ids the table holds: a condition that smuggles in a UNION selects no other ids.
        return con.sql(
            f"SELECT t.trajectory_id, t.trace_id FROM trajectories t SEMI JOIN ({text}) s USING (trajectory_id)"
        ).to_arrow_table()
    if selection.kind == "older_than":
        sql = f"{columns} WHERE {one_of('source', PRODUCTION_SOURCES, table='trajectories')} AND started_at < $v::TIMESTAMPTZ"
    else:
        sql = f"{columns} WHERE {selection.kind} = $v"
    return con.sql(sql, params={"v": selection.value}).to_arrow_table()


def _loose_traces(
    con: duckdb.DuckDBPyConnection, selection: ErasureSelection, matched: dict[str, dict[str, int]]
) -> set[str]:
    """Traces the selection reaches without a trajectory: the trace itself, or the traces whose
    spans name the user or session under an identity key (`store.identity`; counted into
    `matched` per key), assembled or not."""
    if selection.kind == "trace_id":
        return {selection.value}
    if selection.kind not in ("user_id", "session_id"):
        return set()
    return {trace for trace, _ in identity_spans(con, selection.kind, selection.value, matched)}


def identity_spans(
    con: duckdb.DuckDBPyConnection, kind: str, value: str, matched: dict[str, dict[str, int]] | None = None
) -> list[tuple[str, str]]:
    """`(trace_id, span_id)` of the spans naming `value` as their `kind` under an identity key
    (decoded: raw UTF-8 and `\\u` escapes alike); `matched` gets the counts per key."""
    places = identity_sql(kind)
    flags = ", ".join(f"{condition} AS m{i}" for i, (_, condition) in enumerate(places))
    any_place = " OR ".join(condition for _, condition in places)
    rows = con.execute(
        f"SELECT trace_id, span_id, {flags} FROM spans WHERE {any_place}", {"v": value}
    ).fetchall()
    for i, (label, _) in enumerate(places):
        hits = [r[0] for r in rows if r[i + 2]]
        if hits and matched is not None:
            matched[f"spans.{label}"] = {"rows": len(hits), "traces": len(set(hits))}
    return [(r[0], r[1]) for r in rows]


def identity_rows(lake: Lake, snap: Snapshot, kind: str, value: str) -> dict[str, int]:
    """Rows of `snap` still naming `value` as their `kind` (`user_id`, `session_id`): the
    conversations by their column, the spans by their identity keys. What an erasure's check
    counts, independently of the ids its plan found."""
    con = connect(lake, snapshot=snap)
    try:
        found = con.execute(f"SELECT count(*) FROM trajectories WHERE {kind} = $v", {"v": value}).fetchall()
        return {"trajectories": int(found[0][0]), "spans": len(identity_spans(con, kind, value))}
    finally:
        con.close()


def _labelled(
    con: duckdb.DuckDBPyConnection, selection: ErasureSelection, conversations: set[str], traces: set[str]
) -> set[str]:
    """The `labels` rows (by `trajectory_id`) of the selected conversations, of their traces, and,
    for a user, every label naming that user (a label may arrive before its conversation)."""
    found = _ids(
        con, "SELECT trajectory_id FROM labels WHERE trajectory_id IN (SELECT v FROM ids)", conversations
    )
    found |= _ids(con, "SELECT trajectory_id FROM labels WHERE trace_id IN (SELECT v FROM ids)", traces)
    if selection.kind == "user_id":
        found |= {
            r[0]
            for r in con.execute(
                "SELECT trajectory_id FROM labels WHERE user_id = $v", {"v": selection.value}
            ).fetchall()
        }
    return found


def _ids(con: duckdb.DuckDBPyConnection, sql: str, values: set[str]) -> set[str]:
    """The ids `sql` returns, with the table `ids` (one column `v`) holding `values`."""
    if not values:
        return set()
    con.register("ids", pa.table({"v": pa.array(sorted(values), pa.string())}))
    try:
        return {r[0] for r in con.execute(sql).fetchall() if r[0] is not None}
    finally:
        con.unregister("ids")


def locate(lake: Lake, snap: Snapshot, target: TableTarget) -> None:
    """Fill `target`'s row count, the files holding its rows and their bytes (reads the
    matching columns of the table's current files only)."""
    version = snap[target.table]
    if version.version is None or not version.files or (not target.values and target.before is None):
        return
    dataset = ds.dataset(list(version.files), format="parquet", filesystem=None if lake.is_local else lake.fs)
    # delta-rs writes strings as `string_view`, which `is_in` has no kernel for: compare as `string`.
    condition = pc.field(target.column).cast(pa.string()).isin(pa.array(target.values, pa.string()))
    if target.before_column and target.before:
        condition = condition | (
            pc.field(target.before_column) < pa.scalar(datetime.fromisoformat(target.before))
        )
    prefix = lake.table_uri(target.table).removeprefix("file://") + "/"
    for fragment in dataset.get_fragments():
        rows = fragment.count_rows(filter=condition)
        if rows:
            target.rows += rows
            target.files.append(fragment.path.removeprefix("file://").removeprefix(prefix))
    target.bytes = sum(lake.fs.size(lake.fs_path(target.table, f)) for f in target.files)


def newest_write(lake: Lake, target: TableTarget) -> datetime | None:
    """The newest `_written_at` among the current rows of `target.values` (None: no row left).

    An erasure's MERGE is bounded by it (`t._written_at <= ...`): the rows it deletes are all
    that old, and the bound lets Delta's conflict check rule out files other writers add
    meanwhile by their statistics, so a busy collector does not make the MERGE lose every race."""
    current = table_version(lake, target.table)
    if current.version is None or not current.files or not target.values:
        return None
    dataset = ds.dataset(list(current.files), format="parquet", filesystem=None if lake.is_local else lake.fs)
    wanted = pa.array(target.values, pa.string())
    newest = None
    for fragment in dataset.get_fragments():
        # Read and compare as `string`: delta-rs writes `string_view`, which filters have no kernel for.
        rows = fragment.to_table(columns=[target.column, WRITTEN_AT])
        keys = pc.cast(rows.column(target.column), pa.string())
        stamps = rows.column(WRITTEN_AT).filter(pc.fill_null(pc.is_in(keys, value_set=wanted), False))
        if len(stamps):
            found = pc.max(stamps).as_py()
            newest = found if newest is None or found > newest else newest
    return newest


def plan_summary(plan: ErasurePlan) -> dict[str, Any]:
    """Counts only (never ids): what a dry run prints and the audit row records."""
    return {
        "erasure_id": plan.erasure_id,
        "rows": plan.rows,
        "files": {name: len(t.files) for name, t in plan.targets.items()},
        "bytes": sum(t.bytes for t in plan.targets.values()),
        "matched": plan.matched,
    }
