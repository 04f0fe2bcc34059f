"""Writing what the puller and the importer produce into the lake.

Spans are written first, then the traces they touch are re-assembled from *all* of
their spans in the lake (`ingest.lakeio.assemble_traces`, the collector's path), so an
observation that arrives late for an older trace rebuilds that trace's trajectory
instead of making a second, partial one.

Scores become rewards only for trajectories that exist; each reward row is written only
if the lake holds no row with the same key and a newer `scored_at`, so re-reading an
older page (overlap window, resumed pull) never brings back a superseded score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from ingest.labels import correction_label
from ingest.redact import redact_rows
from store.catalog.connection import connect
from store.lake import Lake
from store.vocabulary import equals
from store.writer import write

# `assemble` sets source 'langfuse' on trajectories whose spans all came from Langfuse.
TRAJECTORY_SOURCE = "langfuse"


def write_spans(lake: Lake, rows: Iterable[dict[str, Any]] | pa.Table) -> int:
    """Write span rows (all or nothing), replacing the stored versions of observations that
    changed since they were last pulled; returns how many."""
    return write(lake, "spans", rows, upsert=True).rows


# Columns that say what a span is; `received_at` (when we fetched it) is not among them.
_CONTENT = ("name", "parent_span_id", "start_time", "end_time", "status_code", "status_message", "attributes")


def drop_unchanged_spans(lake: Lake, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` minus those whose stored version has the same content (and in-batch repeats)."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        latest[(row["trace_id"], row["span_id"])] = row
    existing = _select_by_keys(
        lake,
        "spans",
        {"trace_id": [k[0] for k in latest], "span_id": [k[1] for k in latest]},
        f"SELECT s.trace_id, s.span_id, {', '.join('s.' + c for c in _CONTENT)} "
        "FROM spans s JOIN __keys k USING (trace_id, span_id)",
    )
    known = {(r[0], r[1]): r[2:] for r in existing}
    return [
        row
        for key, row in latest.items()
        if key not in known or not _same(known[key], tuple(row.get(c) for c in _CONTENT))
    ]


def _same(stored: tuple[Any, ...], fresh: tuple[Any, ...]) -> bool:
    return all(_normal(a) == _normal(b) for a, b in zip(stored, fresh, strict=True))


def _normal(value: Any) -> Any:
    # DuckDB hands timestamps back in its own zone object; compare instants.
    return value.timestamp() if hasattr(value, "timestamp") else value


def trajectory_ids_of(lake: Lake, trace_ids: Iterable[str]) -> dict[str, str]:
    """trace_id -> trajectory_id of the Langfuse trajectories in the lake.

    A trace holding several agent runs has several trajectories; its scores go to the
    trace-level run (`trajectory_id = trace_id`) when there is one, else the first run.
    """
    rows = _select_by_keys(
        lake,
        "trajectories",
        {"trace_id": sorted(set(trace_ids))},
        "SELECT trace_id, trajectory_id FROM trajectories "
        "WHERE source = ? AND trace_id IN (SELECT trace_id FROM __keys) "
        "ORDER BY trajectory_id = trace_id, started_at DESC",
        [TRAJECTORY_SOURCE],
    )
    # Later rows win: the trace-level run last, else the earliest run.
    return {trace_id: trajectory_id for trace_id, trajectory_id in rows}


def user_ids_of(lake: Lake, trajectory_ids: Iterable[str]) -> dict[str, str | None]:
    """trajectory_id -> its `user_id` (whose conversation a label made from a score is)."""
    rows = _select_by_keys(
        lake,
        "trajectories",
        {"trajectory_id": sorted(set(trajectory_ids))},
        "SELECT trajectory_id, user_id FROM trajectories WHERE trajectory_id IN (SELECT trajectory_id FROM __keys)",
    )
    return dict(rows)


def correction_labels(
    lake: Lake, scored: Iterable[tuple[Mapping[str, Any], Mapping[str, Any], str]]
) -> list[dict[str, Any]]:
    """The `labels` rows of the `CORRECTION` scores among `(score, its reward row, its trace id)`,
    each with its conversation's user (so `trajlake forget --user` finds it), however the scores
    came: pulled, imported from an export file, or pushed to the collector."""
    corrections = [(score, row, trace_id) for score, row, trace_id in scored if is_correction(score)]
    if not corrections:
        return []
    users = user_ids_of(lake, [row["trajectory_id"] for _, row, _ in corrections])
    labels = []
    for score, row, trace_id in corrections:
        label = correction_label(score, row, trace_id=trace_id, user_id=users.get(row["trajectory_id"]))
        if label is not None:
            labels.append(label)
    return labels


def is_correction(score: Mapping[str, Any]) -> bool:
    """Whether a Langfuse score is a `CORRECTION` (the output the trace should have had)."""
    return str(score.get("dataType") or "").upper() == "CORRECTION"


def write_labels(lake: Lake, rows: list[dict[str, Any]]) -> int:
    """Write `labels` rows (redacted as rewards are); a later correction of the same
    conversation replaces the earlier one (the table's key is `trajectory_id, name`)."""
    if not rows:
        return 0
    rows = sorted(redact_rows(rows), key=lambda r: r["labeled_at"])  # later rows win: newest last
    return write(lake, "labels", rows).rows


def trace_attributes(lake: Lake, trace_ids: Iterable[str]) -> dict[str, list[str]]:
    """trace_id -> the attribute JSON texts of its Langfuse spans (for client-side filters)."""
    rows = _select_by_keys(
        lake,
        "spans",
        {"trace_id": sorted(set(trace_ids))},
        "SELECT trace_id, attributes FROM spans "
        f"WHERE {equals('source', 'langfuse', table='spans')} AND trace_id IN (SELECT trace_id FROM __keys)",
    )
    out: dict[str, list[str]] = {}
    for trace_id, attributes in rows:
        out.setdefault(trace_id, []).append(attributes)
    return out


def write_rewards(lake: Lake, rows: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """Write reward rows that are new or newer; returns (written, skipped by reason).

    Within `rows` and against the lake, a key keeps the row with the newest `scored_at`
    (`score_superseded`); a row the lake already holds unchanged is not written again
    (`score_unchanged`), so re-reading an overlap window costs no new files.
    """
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    skipped: dict[str, int] = {}
    # Redacted first: the stored rows were, and an unchanged score must compare equal.
    for row in redact_rows(rows):
        key = (row["trajectory_id"], row["name"], row["scorer"])
        if key not in newest or row["scored_at"] >= newest[key]["scored_at"]:
            newest[key] = row
    if len(rows) > len(newest):
        skipped["score_superseded"] = len(rows) - len(newest)
    existing = _existing_rewards(lake, list(newest))
    fresh = []
    for key, row in newest.items():
        old = existing.get(key)
        if old is not None:
            if old[0].timestamp() > row["scored_at"].timestamp():
                skipped["score_superseded"] = skipped.get("score_superseded", 0) + 1
                continue
            if old[0].timestamp() == row["scored_at"].timestamp() and old[1:] == _reward_content(row):
                skipped["score_unchanged"] = skipped.get("score_unchanged", 0) + 1
                continue
        fresh.append(row)
    fresh.sort(key=lambda r: r["scored_at"])  # later rows win in the view: newest last
    written = write(lake, "rewards", fresh).rows if fresh else 0
    return written, skipped


_REWARD_CONTENT = ("value", "explanation", "status", "error", "metadata")


def _reward_content(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(c) for c in _REWARD_CONTENT)


def _existing_rewards(
    lake: Lake, keys: list[tuple[str, str, str]]
) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    rows = _select_by_keys(
        lake,
        "rewards",
        {"trajectory_id": [k[0] for k in keys], "name": [k[1] for k in keys], "scorer": [k[2] for k in keys]},
        f"SELECT trajectory_id, name, scorer, scored_at, {', '.join(_REWARD_CONTENT)} FROM rewards "
        "JOIN __keys USING (trajectory_id, name, scorer)",
    )
    return {(r[0], r[1], r[2]): r[3:] for r in rows}


def _select_by_keys(
    lake: Lake, table: str, keys: dict[str, list[str]], sql: str, params: list[Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows `sql` selects from `table` with the wanted keys registered as the table `__keys`
    (one text column per key); none when no key is wanted or the lake has no `table` yet."""
    if not next(iter(keys.values()), None) or not lake.has_table(table):
        return []
    con = connect(lake)
    try:
        con.register(
            "__keys", pa.table({name: pa.array(values, pa.string()) for name, values in keys.items()})
        )
        return con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()
    finally:
        con.close()
