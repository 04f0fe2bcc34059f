"""Importing Langfuse exports from disk: JSON or JSONL of traces, observations and scores.

Accepted records (mixed freely in one file):

- **traces** in the `TraceWithFullDetails` shape of the v3/v4 SDKs and UI exports
  (`{id, timestamp, name, userId, sessionId, tags, environment, metadata, ...,
  observations: [...], scores: [...]}`);
- **observations**, v2 (`GET /api/public/v2/observations` items) or legacy;
- **scores**, v3 (`subject`, typed `value`) or v1 (`traceId`, `stringValue`).

File layouts: JSONL (one record per line), a JSON array of records, a single JSON
object, or a saved API response `{"data": [...], "meta": {...}}`; any of them gzip-compressed
or alone in a zip, read within bounds (`ingest.langfuse.source`: a compression bomb, an
over-long line or an over-large document is refused, `ExportUnreadable`, nothing written).

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

import gzip
import json
import os
import time
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ingest.lakeio import assemble_traces
from ingest.langfuse.errors import ExportNotFound, ExportUnreadable, MalformedExport, RecordProblem
from ingest.langfuse.sink import correction_labels, trajectory_ids_of, write_labels, write_rewards
from ingest.langfuse.source import open_export
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


def classify_record(record: Any) -> str:
    """`trace`, `observation`, `score` or `unknown` for one decoded record."""
    if not isinstance(record, Mapping):
        return "unknown"
    if "observations" in record or (
        "timestamp" in record
        and "startTime" not in record
        and "dataType" not in record
        and "value" not in record
    ):
        return "trace"
    if "startTime" in record and ("type" in record or "traceId" in record):
        return "observation"
    if "dataType" in record or (
        "name" in record and "value" in record and ("subject" in record or "traceId" in record)
    ):
        return "score"
    return "unknown"


def iter_records(path: Path) -> Iterator[tuple[int, Any | RecordProblem]]:
    """(line number, decoded record or a `RecordProblem`) for every record of an export:
    plain, gzip or a zip of one file, read within `ingest.langfuse.source`'s bounds
    (`ExportUnreadable` past one)."""
    try:
        with open_export(path) as stream:
            head = stream.handle.read(1 << 16)
        with open_export(path) as stream:  # opened again: a zip member cannot rewind
            first = head.decode("utf-8", errors="replace").lstrip()[:1]
            if first == "[" or (first == "{" and _is_single_document(head.decode("utf-8", errors="replace"))):
                yield from _document_records(stream.read_document(b""))
                return
            for number, raw_line in stream.lines():
                yield from _line_records(number, raw_line)
    except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as exc:
        raise ExportUnreadable(str(path), f"its compressed data is damaged ({exc})") from None


def _document_records(raw: bytes) -> Iterator[tuple[int, Any | RecordProblem]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw.count(b"\n", 0, exc.start) + 1
        yield at, RecordProblem(at, "invalid_utf8", f"byte {exc.start} of the file: {exc.reason}")
        return
    yield from _json_document(text)


def _line_records(number: int, raw_line: bytes) -> Iterator[tuple[int, Any | RecordProblem]]:
    data = raw_line.strip()
    if not data:
        return
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        reason = "invalid_utf8" if "UTF-8" in exc.msg else "invalid_json"
        detail = (
            _TOO_DEEP if "recursion" in exc.msg or "depth" in exc.msg else f"{exc.msg} at column {exc.colno}"
        )
        yield number, RecordProblem(number, reason, detail)
        return
    if _is_api_page(record):  # a saved API response per line (`{"data": [...], "meta": ...}`)
        for item in record["data"]:
            yield number, item
    else:
        yield number, record


_TOO_DEEP = "nested too deep to read (no export nests more than a few dozen levels)"


def _is_api_page(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("data"), list) and "id" not in record


def _is_single_document(head: str) -> bool:
    """A file starting with `{` is JSONL unless its first line alone is not a whole object."""
    first_line = head.split("\n", 1)[0].strip()
    try:
        orjson.loads(first_line)
    except orjson.JSONDecodeError as exc:
        # The object continues on the next lines (a pretty-printed document), unless the
        # line is whole but unreadable (too deep, not UTF-8): JSONL, reported per line.
        return not any(m in str(exc) for m in ("depth limit", "not valid UTF-8"))
    return False


def _json_document(text: str) -> Iterator[tuple[int, Any | RecordProblem]]:
    """Records of a JSON document, each with the line it starts on."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    line_at = _LineCounter(text)
    if pos < len(text) and text[pos] == "{":
        decoded = _decode_at(decoder, text, pos, line_at)
        if isinstance(decoded, RecordProblem):
            yield decoded.line, decoded
            return
        obj = decoded[0]
        if _is_api_page(obj):
            # A saved API response: line numbers of items are not tracked inside it.
            for index, item in enumerate(obj["data"]):
                yield (
                    line_at(pos),
                    item
                    if isinstance(item, dict)
                    else RecordProblem(line_at(pos), "unknown_record", f"data[{index}] is not an object"),
                )
            return
        yield line_at(pos), obj
        return
    pos += 1  # past "["
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            yield (
                line_at(pos),
                RecordProblem(line_at(pos), "invalid_json", "the array is not closed (truncated file?)"),
            )
            return
        if text[pos] == "]":
            return
        decoded = _decode_at(decoder, text, pos, line_at)
        if isinstance(decoded, RecordProblem):
            yield decoded.line, decoded
            return
        obj, end = decoded
        yield line_at(pos), obj
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] != "]":
            yield (
                line_at(pos),
                RecordProblem(line_at(pos), "invalid_json", f"expected `,` or `]`, found {text[pos]!r}"),
            )
            return


def _decode_at(
    decoder: json.JSONDecoder, text: str, pos: int, line_at: _LineCounter
) -> tuple[Any, int] | RecordProblem:
    """The JSON value starting at `pos` and the offset after it, or why none can be read there
    (which ends the document: nothing after a broken value can be trusted)."""
    try:
        return decoder.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        return RecordProblem(exc.lineno, "invalid_json", f"{exc.msg} at column {exc.colno}")
    except RecursionError:
        return RecordProblem(line_at(pos), "invalid_json", _TOO_DEEP)


class _LineCounter:
    """Line number of increasing offsets in `text`, counted incrementally."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def __call__(self, pos: int) -> int:
        if pos < self.pos:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


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
                    problems.append(RecordProblem(line, "invalid_json", _TOO_DEEP))
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
