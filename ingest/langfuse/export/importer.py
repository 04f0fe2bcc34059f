"""Importing a Langfuse export file into the lake: spans, trajectories and rewards.

The file's records are read by `ingest.langfuse.export.records` (accepted records and
layouts are described there).

**Malformed records reject the file.** The whole file is read and checked first;
every problem is reported with its line number (up to the first 10 shown, all in
`MalformedExport.problems`), and nothing is written. Rationale: an export is a finished
artefact, so a bad line means a truncated or hand-edited file, and importing the rest
would silently leave holes in traces that later look complete. Fix the lines and rerun.

Spans are written in one all-or-nothing commit (JSONL is streamed line by line, so
memory stays bounded by the write buffer; a JSON document is parsed whole); the touched traces are then assembled from all their
spans in the lake, and the scores written as rewards. Re-importing the same file gives
the same rows under the same keys: the views show no duplicates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ingest.lakeio import assemble_traces
from ingest.langfuse.errors import ExportNotFound, MalformedExport, RecordProblem
from ingest.langfuse.export.records import TOO_DEEP, classify_record, iter_records
from ingest.langfuse.sink import correction_labels, trajectory_ids_of, write_labels, write_rewards
from ingest.langfuse.spans import ObservationError, observation_to_span, to_trace_id, trace_to_spans
from ingest.records import BadRecord
from ingest.redact import redact_rows
from ingest.scores import DEFAULT_CATEGORY_VALUES, score_target, score_to_reward
from store.lake import Lake
from store.rows import utc_now
from store.writer import write

SPAN_BATCH_ROWS = 20_000
MAX_PROBLEMS = 1000


@dataclass
class ImportReport:
    """What one `import_langfuse_export` did."""

    path: str
    records: int = 0
    traces: int = 0
    observations: int = 0
    spans_written: int = 0
    trajectories: int = 0
    scores: int = 0
    rewards: int = 0
    labels: int = 0  # corrections (`CORRECTION` scores): the conversation's right answer
    skipped: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)  # read+spans, assemble, rewards


def import_langfuse_export(
    lake: Lake | str,
    path: str | os.PathLike[str],
    *,
    category_values: Mapping[str, float] | None = None,
    show_progress: bool = False,
    workers: int = 1,
) -> ImportReport:
    """Import a Langfuse export file into `lake`: spans, trajectories (source `langfuse`), rewards.

    `workers` > 1 assembles trajectories in that many processes (same rows, faster on
    a machine with idle cores).

    Raises `ExportNotFound` for a missing file and `MalformedExport` (every bad record
    with its line number) when any record cannot be imported; then nothing is written.
    """
    lake = Lake.of(lake)
    file = Path(path)
    if not file.is_file():
        raise ExportNotFound(str(path))
    started = time.monotonic()
    categories = {
        k.strip().lower(): float(v) for k, v in (category_values or DEFAULT_CATEGORY_VALUES).items()
    }
    report = ImportReport(path=str(path))
    problems: list[RecordProblem] = []
    trace_ids: set[str] = set()
    scores: list[tuple[int, dict[str, Any]]] = []
    received_at = utc_now()
    progress = _progress(show_progress, file)

    def spans() -> Iterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        for line, record in iter_records(file):
            report.records += 1
            if progress is not None and report.records % 1000 == 0:
                progress.update(progress.task_ids[0], completed=report.records)
            if isinstance(record, RecordProblem):
                if len(problems) < MAX_PROBLEMS:  # a file of garbage lines costs no more memory
                    problems.append(record)
                continue
            kind = classify_record(record)
            try:
                if kind == "trace":
                    rows = list(trace_to_spans(record, received_at=received_at))
                    report.traces += 1
                    trace_ids.add(to_trace_id(record["id"]))
                    for score in record.get("scores") or []:
                        _check_score(score, categories)
                        scores.append((line, score))
                elif kind == "observation":
                    rows = [observation_to_span(record, received_at=received_at)]
                elif kind == "score":
                    _check_score(record, categories)
                    scores.append((line, record))
                    rows = []
                else:
                    keys = ", ".join(sorted(record)) if isinstance(record, Mapping) else type(record).__name__
                    raise ObservationError(
                        "unknown_record",
                        f"neither a trace (`observations`), an observation (`startTime`, `type`) nor a score "
                        f"(`dataType`, `value`); got: {keys}",
                    )
            except BadRecord as exc:  # an observation's or a score's
                if len(problems) < MAX_PROBLEMS:
                    problems.append(RecordProblem(line, exc.reason, exc.detail))
                continue
            except (orjson.JSONEncodeError, RecursionError):
                # Readable, but nested deeper than its values can be stored as JSON text
                # (orjson writes 254 levels): the record's problem, not a traceback.
                if len(problems) < MAX_PROBLEMS:
                    problems.append(RecordProblem(line, "invalid_json", TOO_DEEP))
                continue
            report.observations += len(rows)
            trace_ids.update(row["trace_id"] for row in rows)
            if problems:
                continue  # the file will be refused: keep checking, stop buffering
            batch.extend(rows)
            if len(batch) >= SPAN_BATCH_ROWS:
                yield redact_rows(batch)
                batch = []
        if problems:
            # Raised inside the writer's input: it discards its temporary files.
            raise MalformedExport(str(path), problems, report.records)
        if batch:
            yield redact_rows(batch)

    try:
        report.spans_written = write(lake, "spans", spans()).rows
    finally:
        if progress is not None:
            progress.stop()
    mark = time.monotonic()
    report.phases_s["read_and_write_spans"] = round(mark - started, 3)
    counts = assemble_traces(lake, trace_ids, workers=workers)
    report.trajectories = counts.trajectories
    report.phases_s["assemble"] = round(time.monotonic() - mark, 3)
    mark = time.monotonic()
    report.scores = len(scores)
    report.rewards, report.labels, skipped = _write_scores(lake, scores, categories)
    report.skipped = skipped
    report.phases_s["rewards"] = round(time.monotonic() - mark, 3)
    report.elapsed_s = round(time.monotonic() - started, 3)
    return report


def _check_score(score: Any, categories: Mapping[str, float]) -> None:
    if not isinstance(score, Mapping):
        raise ObservationError("bad_field", "a score is not an object")
    score_to_reward(score, trajectory_id="-", category_values=categories)


def _write_scores(
    lake: Lake, scores: list[tuple[int, dict[str, Any]]], categories: Mapping[str, float]
) -> tuple[int, int, dict[str, int]]:
    """(rewards written, labels written, skipped by reason): every score of a known trace as a
    reward, a correction also as its conversation's label."""
    skipped: dict[str, int] = {}
    targets = []
    for _, score in scores:
        target = score_target(score)
        if target.kind not in ("trace", "observation") or not target.trace_id:
            key = f"score_{target.kind}_subject"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        targets.append((score, to_trace_id(target.trace_id)))
    trajectories = trajectory_ids_of(lake, {t for _, t in targets})
    rows, scored = [], []
    for score, trace_id in targets:
        trajectory_id = trajectories.get(trace_id)
        if trajectory_id is None:
            skipped["score_unknown_trace"] = skipped.get("score_unknown_trace", 0) + 1
            continue
        rows.append(score_to_reward(score, trajectory_id=trajectory_id, category_values=categories))
        scored.append((score, rows[-1], trace_id))
    written, not_written = write_rewards(lake, rows) if rows else (0, {})
    skipped.update(not_written)
    return written, write_labels(lake, correction_labels(lake, scored)), skipped


def _progress(show: bool, file: Path) -> Any:
    if not show:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn(f"importing {file.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),  # stdout stays clean for `--json`
    )
    progress.add_task("records", total=None)
    progress.start()
    return progress
