"""Incremental, resumable pulls of a Langfuse project into the lake.

One run, for one scope (host + filters):

1. **Plan the window.** A fresh run covers `[watermark - overlap, now)` (clipped to the
   `since`/`until` filters; the first run starts at `since`, or the beginning). The
   overlap re-reads recent history so observations that reached Langfuse late for an
   older trace are picked up; re-read rows carry the same keys and the views keep one.
   A run that finds an interrupted pull in the watermark resumes *its* window and
   cursor instead.
2. **Observations** (`GET /api/public/v2/observations`, cursor paging, every field
   group): each page becomes `spans` rows. Every `checkpoint_pages` pages, and at the
   end, the buffered spans are written, the traces they touch are re-assembled from all
   their spans in the lake, and only then is the next cursor saved. A crash costs at
   most the pages since the last checkpoint, which the resumed run reads again.
3. **Scores** (`GET /api/public/v3/scores`, same window on the score timestamp): each
   page becomes `rewards` rows for the trajectories of their traces, checkpointed the
   same way.
4. The window's end becomes the new watermark and the phase goes back to `idle`.

The report says what was read, written and skipped (with reason codes).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ingest.lakeio import AssembleResult, assemble_traces
from ingest.langfuse.client import LangfuseClient, Page
from ingest.langfuse.config import LangfuseConfig, PullFilters, scope_of
from ingest.langfuse.errors import LangfuseRequestRejected
from ingest.langfuse.filters import matches_trace_filters, observation_filter, plan_window
from ingest.langfuse.sink import (
    correction_labels,
    drop_unchanged_spans,
    trace_attributes,
    trajectory_ids_of,
    write_labels,
    write_rewards,
    write_spans,
)
from ingest.langfuse.spans import observation_to_span, to_trace_id
from ingest.langfuse.watermark import PullState, read_state, save_state
from ingest.records import BadRecord
from ingest.redact import redact_rows
from ingest.scores import score_target, score_to_reward
from store.lake import Lake
from store.rows import utc_now

MAX_PROBLEMS_KEPT = 20


@dataclass
class PullReport:
    """What one `pull_langfuse` run did."""

    scope: str
    window_from: datetime | None
    window_to: datetime | None
    resumed: bool = False
    observations: int = 0
    spans_written: int = 0
    traces: int = 0
    trajectories: int = 0
    scores: int = 0
    rewards: int = 0
    labels: int = 0  # CORRECTION scores kept as the conversation's right answer
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    requests: int = 0
    retries: int = 0
    waited_s: float = 0.0
    elapsed_s: float = 0.0
    watermark: datetime | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-able summary (kept in the watermark state as `last_run`)."""
        out = asdict(self)
        for key in ("window_from", "window_to", "watermark"):
            out[key] = out[key].isoformat() if out[key] else None
        out["problems"] = out["problems"][:5]
        return out


def pull_langfuse(
    lake: Lake | str,
    config: LangfuseConfig,
    filters: PullFilters | None = None,
    *,
    client: LangfuseClient | None = None,
    now: datetime | None = None,
    show_progress: bool = False,
    on_checkpoint: Callable[[PullState], None] | None = None,
) -> PullReport:
    """Pull what is new in a Langfuse project into `lake` (spans, trajectories, rewards).

    Resumes an interrupted pull of the same scope; otherwise starts a new window after
    the scope's watermark. `on_checkpoint` is called after each saved checkpoint.
    Raises `LangfuseAuthError`, `LangfuseUnreachable`, `LangfuseProtocolError`,
    `LangfuseRequestRejected` or `LangfuseUnavailable` (see `errors.py`); whatever was
    checkpointed before stays, and the next run continues from there.
    """
    lake = Lake.of(lake)
    filters = filters or PullFilters()
    started = time.monotonic()
    scope = scope_of(config.host, filters)
    state = read_state(lake, scope)
    report = PullReport(scope=scope, window_from=None, window_to=None, resumed=state.in_progress)
    if not state.in_progress:
        state.window_from, state.window_to = plan_window(state, filters, config.overlap, now or utc_now())
        state.phase, state.cursor, state.counts = "observations", None, {}
    report.window_from, report.window_to = state.window_from, state.window_to
    if state.window_from is not None and state.window_to is not None and state.window_from >= state.window_to:
        state.phase = "idle"  # nothing can be in an empty window

    own_client = client is None
    client = client or LangfuseClient(config)
    skipped: Counter[str] = Counter()
    try:
        with _progress(show_progress) as progress:
            task = progress.add_task(f"Langfuse {config.host}", total=None) if progress else None

            def tick(what: str) -> None:
                if progress is not None and task is not None:
                    progress.update(
                        task,
                        description=f"Langfuse {config.host}: {what}; {report.observations} observations, "
                        f"{report.trajectories} trajectories, {report.scores} scores, {client.stats.retries} retries",
                    )

            run = _Pull(lake, config, filters, client, state, report, skipped, tick, on_checkpoint)
            if state.phase == "observations":
                _pull_observations(run)
            if state.phase == "scores":
                _pull_scores(run)
    finally:
        report.requests, report.retries = client.stats.requests, client.stats.retries
        report.waited_s = round(client.stats.waited_s, 3)
        report.skipped = dict(skipped)
        if own_client:
            client.close()

    report.elapsed_s = round(time.monotonic() - started, 3)
    state.watermark = state.window_to
    state.phase, state.cursor = "idle", None
    report.watermark = state.watermark
    state.last_run = report.summary()
    save_state(lake, state)
    return report


@dataclass
class _Pull:
    """What both phases of one run (observations, then scores) read from and write to."""

    lake: Lake
    config: LangfuseConfig
    filters: PullFilters
    client: LangfuseClient
    state: PullState
    report: PullReport
    skipped: Counter[str]
    tick: Callable[[str], None]
    on_checkpoint: Callable[[PullState], None] | None


def _read_pages(
    run: _Pull,
    phase: str,
    fetch: Callable[[str | None], Page],
    commit: Callable[[list[dict[str, Any]], bool, bool], None],
) -> None:
    """Read `phase`'s pages from the saved cursor; every `checkpoint_pages` pages, and at the end,
    hand what was read to `commit(items, first, done)` (which writes it and sets the phase) and
    move the cursor, so an interrupted pull resumes from its last checkpoint."""
    state = run.state
    buffer: list[dict[str, Any]] = []
    pages = 0
    cursor = state.cursor  # the page to read next; `state.cursor` moves only at checkpoints
    first = True
    while True:
        page = _first_or_next(
            fetch,
            cursor,
            resuming=cursor is not None and cursor == state.cursor and pages == 0,
            report=run.report,
        )
        cursor = page.next_cursor
        buffer.extend(page.items)
        pages += 1
        run.tick(phase)
        done = page.next_cursor is None
        if done or pages >= run.config.checkpoint_pages:
            commit(buffer, first, done)
            first = False
            state.cursor = page.next_cursor
            if not done or state.phase != "idle":
                save_state(run.lake, state)
            if run.on_checkpoint:
                run.on_checkpoint(state)
            buffer, pages = [], 0
        if done:
            return


def _pull_observations(run: _Pull) -> None:
    state, report, skipped = run.state, run.report, run.skipped
    filter_json = observation_filter(run.filters, state.window_from, state.window_to)

    def fetch(cursor: str | None) -> Page:
        return run.client.observations_page(
            from_start_time=state.window_from,
            to_start_time=state.window_to,
            filter_json=filter_json,
            cursor=cursor,
        )

    def commit(observations: list[dict[str, Any]], first: bool, done: bool) -> None:
        received_at = utc_now()
        rows = []
        for obs in observations:
            try:
                rows.append(observation_to_span(obs, received_at=received_at))
            except BadRecord as exc:  # ObservationError, or a bad time
                skipped[f"observation_{exc.reason}"] += 1
                if len(report.problems) < MAX_PROBLEMS_KEPT:
                    report.problems.append(f"observation `{obs.get('id')}`: {exc}")
        report.observations += len(observations)
        # The first checkpoint of a resumed run re-reads the pages whose commit was cut
        # short: their spans may be on disk without their trajectories, so every trace
        # they touch is re-assembled even where the spans are unchanged.
        written, counts = _commit_spans(run.lake, rows, reassemble_all=report.resumed and first)
        report.spans_written += written
        if len(rows) > written:
            skipped["observation_unchanged"] += len(rows) - written
        report.traces += counts.traces
        report.trajectories += counts.trajectories
        state.phase = "scores" if done and run.config.scores else ("idle" if done else "observations")
        state.counts["observations"] = state.counts.get("observations", 0) + len(observations)

    _read_pages(run, "observations", fetch, commit)


def _first_or_next(
    fetch: Callable[[str | None], Page], cursor: str | None, *, resuming: bool, report: PullReport
) -> Page:
    """The page at `cursor`; when a saved cursor from an interrupted run is refused (a
    server upgrade, an expired cursor), the window is read again from its start instead:
    re-read rows are unchanged and skipped, so nothing is lost or duplicated."""
    try:
        return fetch(cursor)
    except LangfuseRequestRejected:
        if not resuming:
            raise
        report.problems.append(
            "the saved cursor was refused (HTTP 400); re-reading the window from its start"
        )
        return fetch(None)


def _commit_spans(
    lake: Lake, rows: list[dict[str, Any]], *, reassemble_all: bool = False
) -> tuple[int, AssembleResult]:
    """Write the spans that are new or changed and re-assemble their traces.

    Re-read spans (overlap window, resumed pages) that the lake already holds unchanged
    are dropped here, so a scheduled run over quiet data writes nothing.
    """
    # Redacted before the comparison, so a span holding a secret compares equal to its stored copy.
    fresh = drop_unchanged_spans(lake, redact_rows(rows))
    if fresh:
        write_spans(lake, fresh)
    touched = {row["trace_id"] for row in (rows if reassemble_all else fresh)}
    return len(fresh), assemble_traces(lake, touched) if touched else AssembleResult()


def _pull_scores(run: _Pull) -> None:
    state, report = run.state, run.report
    environment = ",".join(run.filters.environments) or None

    def fetch(cursor: str | None) -> Page:
        return run.client.scores_page(
            from_timestamp=state.window_from,
            to_timestamp=state.window_to,
            environment=environment,
            session_id=None,  # the API's sessionId means session-level scores; trace scores are filtered below
            cursor=cursor,
        )

    def commit(scores: list[dict[str, Any]], first: bool, done: bool) -> None:
        report.scores += len(scores)
        report.rewards += _commit_scores(run, scores)
        state.phase = "idle" if done else "scores"
        state.counts["scores"] = state.counts.get("scores", 0) + len(scores)

    _read_pages(run, "scores", fetch, commit)


def _commit_scores(run: _Pull, scores: list[dict[str, Any]]) -> int:
    lake, filters, report, skipped = run.lake, run.filters, run.report, run.skipped
    targets = []
    for score in scores:
        try:
            target = score_target(score)
        except BadRecord as exc:
            skipped[f"score_{exc.reason}"] += 1
            continue
        if target.kind not in ("trace", "observation") or not target.trace_id:
            skipped[f"score_{target.kind}_subject" if target.kind != "observation" else "score_no_trace"] += 1
            continue
        targets.append((score, to_trace_id(target.trace_id)))
    trace_ids = {trace_id for _, trace_id in targets}
    trajectories = trajectory_ids_of(lake, trace_ids)
    narrowed = None
    if filters.narrows_traces:
        attrs = trace_attributes(lake, trace_ids)
        narrowed = {t for t, texts in attrs.items() if matches_trace_filters(texts, filters)}
    rows, scored = [], []
    for score, trace_id in targets:
        if narrowed is not None and trace_id not in narrowed:
            skipped["score_outside_filters"] += 1
            continue
        trajectory_id = trajectories.get(trace_id)
        if trajectory_id is None:
            skipped["score_unknown_trace"] += 1
            if len(report.problems) < MAX_PROBLEMS_KEPT:
                report.problems.append(
                    f"score `{score.get('id')}` ({score.get('name')}): trace `{trace_id}` has no trajectory in "
                    "the lake (outside the pulled window or filters)"
                )
            continue
        try:
            reward = score_to_reward(
                score, trajectory_id=trajectory_id, category_values=run.config.category_values
            )
            rows.append(reward)
            scored.append((score, reward, trace_id))
        except BadRecord as exc:
            skipped[f"score_{exc.reason}"] += 1
            if len(report.problems) < MAX_PROBLEMS_KEPT:
                report.problems.append(f"score `{score.get('id')}`: {exc}")
    written, not_written = write_rewards(lake, rows) if rows else (0, {})
    skipped.update(not_written)
    report.labels += write_labels(lake, correction_labels(lake, scored))
    return written


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _progress(show: bool) -> Any:
    if not show:
        return _NoProgress()
    # On stderr, so `--json` output on stdout stays machine-readable.
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=Console(stderr=True)
    )
