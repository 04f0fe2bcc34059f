"""Import chat-format JSONL files into the lake: every line checked first, then written.

A bad line stops the import before anything is written, with the file and line number and
what is wrong (`ingest.jsonl.lines`: line size, nesting, numbers; `convert`: the fields);
secrets in the text are redacted as the collector redacts them (`ingest.redact`).

Ids: a line's `id` (or, without one, a digest of its conversation) names its trajectory.
An id that appears twice in one import is an error naming both lines. An id already in
the lake is compared with what the line would write: the same conversation is skipped (a
re-import that changes nothing commits nothing, and says so); a different one is an error
naming the line and the columns that differ, unless `replace` is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ingest.errors import MalformedPayload
from ingest.jsonl.convert import SCORER, LineError, convert
from ingest.jsonl.lines import DEFAULT_MAX_LINE_BYTES, FIX, read_lines
from ingest.redact import RedactionConfig, redact_table
from store.catalog.connection import connect
from store.conform import rows_to_batch
from store.lake import Lake
from store.rows import utc_now
from store.schema import TABLES
from store.writer import write

# What a line decides about its trajectory, compared with the lake's row on a re-import.
# `started_at` is compared only when the line gives one (else the import's time stands in).
COMPARED = (
    "source",
    "session_id",
    "user_id",
    "agent_name",
    "model",
    "policy",
    "messages",
    "tools",
    "final_output",
    "metadata",
    "has_content",
    "status",
)


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote."""

    files: int
    trajectories: int  # written (new, or replaced)
    feedback: int  # feedback rewards written
    unchanged: int = 0  # already in the lake exactly so: not written again


@dataclass
class _Line:
    where: str  # `file:line`
    row: dict[str, Any]
    reward: dict[str, Any] | None
    gives_start: bool


def _read(paths: Sequence[str | os.PathLike[str]], max_line_bytes: int) -> list[_Line]:
    """Every line converted; an id twice in one file is an error, and so is an id in two files
    with different conversations (the same conversation in two files is kept once)."""
    now = utc_now()
    lines: list[_Line] = []
    seen: dict[str, _Line] = {}
    for path in paths:
        for number, obj in read_lines(path, max_line_bytes):
            where = f"{path}:{number}"
            try:
                row, reward = convert(obj, now)
            except LineError as exc:
                raise MalformedPayload("conversation", str(exc), path=where, fix=FIX) from None
            line = _Line(where, row, reward, obj.get("started_at") is not None)
            earlier = seen.get(row["trajectory_id"])
            if earlier is None:
                seen[row["trajectory_id"]] = line
                lines.append(line)
            elif earlier.where.rsplit(":", 1)[0] == str(path) or (earlier.row, earlier.reward) != (
                row,
                reward,
            ):
                raise MalformedPayload(
                    "conversation",
                    f"trajectory `{row['trajectory_id']}` is also at {earlier.where}; each `id` (or "
                    "conversation, without one) may appear once per file, and alike in every file",
                    path=where,
                    fix=FIX,
                )
    return lines


def _in_lake(lake: Lake, ids: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, float | None]]:
    """The lake's trajectories of `ids` (compared columns) and their imported feedback values."""
    if not ids:
        return {}, {}
    with connect(lake, read_only=True) as con:
        con.register("__ids", pa.table({"trajectory_id": pa.array(ids, pa.string())}))
        columns = ", ".join(f'"{c}"' for c in ("trajectory_id", "started_at", *COMPARED))
        rows = con.sql(
            f"SELECT {columns} FROM trajectories SEMI JOIN __ids USING (trajectory_id)"
        ).to_arrow_table()
        feedback = con.execute(
            "SELECT trajectory_id, value FROM rewards SEMI JOIN __ids USING (trajectory_id) "
            "WHERE name = 'user_feedback' AND scorer = ?",
            [SCORER],
        ).fetchall()
    return {r["trajectory_id"]: r for r in rows.to_pylist()}, dict(feedback)


def _differences(line: _Line, new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    names = [*COMPARED, "started_at"] if line.gives_start else list(COMPARED)
    return [name for name in names if new.get(name) != old.get(name)]


def import_files(
    lake: Lake | str,
    paths: Sequence[str | os.PathLike[str]],
    redaction: RedactionConfig | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    replace: bool = False,
) -> ImportResult:
    """Import every conversation of `paths` (one JSON object per line; blank lines skipped): the
    new or changed trajectories in one commit, then their feedback; nothing at all when any line
    is bad, and no commit when nothing changed."""
    lake = Lake.of(lake)
    lines = _read(paths, max_line_bytes)
    if not lines:
        return ImportResult(files=len(paths), trajectories=0, feedback=0)
    table = redact_table(
        pa.Table.from_batches([rows_to_batch(TABLES["trajectories"], [x.row for x in lines])]), redaction
    )
    redacted = table.to_pylist()
    ids = [x.row["trajectory_id"] for x in lines]
    existing, feedback = _in_lake(lake, ids) if lake.has_table("trajectories") else ({}, {})
    keep: list[int] = []
    rewards: list[dict[str, Any]] = []
    unchanged = 0
    for i, (line, new) in enumerate(zip(lines, redacted, strict=True)):
        tid = new["trajectory_id"]
        old = existing.get(tid)
        differs = _differences(line, new, old) if old is not None else []
        stored = feedback.get(tid)
        if line.reward is not None and tid in feedback and stored != line.reward["value"]:
            differs.append(f"feedback ({stored!r} -> {line.reward['value']!r})")
        if differs and not replace:
            raise MalformedPayload(
                "conversation",
                f"trajectory `{tid}` is already in the lake with other content ({', '.join(differs)}); "
                "give it a new `id`, or import with `--replace` to overwrite it",
                path=line.where,
                fix=FIX,
            )
        if old is None or differs:
            keep.append(i)
        else:
            unchanged += 1
        if line.reward is not None and (tid not in feedback or stored != line.reward["value"]):
            rewards.append(line.reward)
    if keep:
        write(lake, "trajectories", table.take(keep))
    if rewards:
        write(lake, "rewards", rewards)
    return ImportResult(files=len(paths), trajectories=len(keep), feedback=len(rewards), unchanged=unchanged)
