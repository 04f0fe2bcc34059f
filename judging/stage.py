"""The scoring stage: read what needs scores from the lake, score it, write `rewards`, summarise.

`score(lake, reward, config=ScoreConfig(), judge=JudgeConfig(...))` is the one entry
point; the CLI and the Prefect flows call it. `reward` is `"ruler"`, a built-in name,
`"package.module:function"`, a `ProgrammaticReward` or a `SqlReward`.

Resumable and idempotent by construction:

- what the same `scorer` already scored successfully is skipped (failed rows are retried);
- rows are committed every `flush_every` groups or `flush_interval_s` seconds, and on
  the way out of an interrupted run (Ctrl-C), so a killed run loses at most one batch;
- RULER verdicts are also cached durably the moment they arrive (`judging.ruler.cache`),
  so even rows lost to a `kill -9` cost no judge call when the next run redoes them.

Every RULER row carries, in `metadata`: `seed` (the group's shuffle seed), `label` (the
id the judge saw), `group_size`, `cached`, `attempts`, `truncated`, and the group call's
`prompt_tokens`, `completion_tokens` and `cost_usd` (group totals, repeated on each row
of the group; a cached row reports what the original call cost and `cached: true`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

import store
from judging.config import JudgeConfig, ScoreConfig
from judging.errors import JudgeUnreachableError, RewardSpecError, SqlRewardError
from judging.registry import ProgrammaticReward, evaluate_reward, get_reward
from judging.ruler.cache import JudgeCache
from judging.ruler.group import GroupVerdict, RulerJudge, run_sync
from judging.select import (
    DONE,
    candidates_sql,
    count_trajectories,
    load_scenarios,
    run_checked,
    selected_groups,
    stream_groups,
    stream_trajectories,
    where_clause,
)
from judging.sql_reward import SqlReward, sql_reward_query
from judging.summary import ScoreSummary, count_failures, value_stats
from store.catalog import check_read_only

RewardSpec = str | ProgrammaticReward | SqlReward
# After this many groups in a row fail with `judge_unreachable` (retries included), the
# endpoint is down: stop instead of recording the same failure for every remaining group.
UNREACHABLE_STOP = 3


@dataclass
class RewardWriter:
    """Buffers reward rows and commits them in batches; keeps a light copy for the summary."""

    lake: store.Lake
    flush_every: int
    flush_interval_s: float
    flush_rows: int = 50_000
    buffer: list[dict[str, Any]] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)
    rows_written: int = 0
    _groups_pending: int = 0
    _last_flush: float = field(default_factory=time.monotonic)

    def add(self, rows: list[dict[str, Any]], groups: int = 1, *, auto_flush: bool = True) -> bool:
        """Buffer rows; commit when a threshold is reached (or report that one is, with `auto_flush=False`)."""
        self.buffer.extend(rows)
        self.written.extend(
            {k: r[k] for k in ("name", "group_id", "value", "status", "error", "trajectory_id")} for r in rows
        )
        self._groups_pending += groups
        due = (
            self._groups_pending >= self.flush_every
            or len(self.buffer) >= self.flush_rows
            or time.monotonic() - self._last_flush >= self.flush_interval_s
        )
        if due and auto_flush:
            self.flush()
        return due

    def flush(self) -> None:
        if self.buffer:
            store.write(self.lake, "rewards", self.buffer)
            self.rows_written += len(self.buffer)
        self.buffer = []
        self._groups_pending = 0
        self._last_flush = time.monotonic()


def reward_row(
    trajectory_id: str,
    name: str,
    scorer: str,
    *,
    value: float | None,
    status: str,
    group_id: str | None,
    run_id: str,
    scored_at: Any,
    error: str | None = None,
    explanation: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One `rewards` row."""
    return {
        "trajectory_id": trajectory_id,
        "name": name,
        "scorer": scorer,
        "value": value,
        "explanation": explanation,
        "group_id": group_id,
        "scored_at": scored_at,
        "run_id": run_id,
        "status": status,
        "error": error,
        "metadata": json.dumps(metadata or {}, sort_keys=True),
    }


class _Bar:
    """A rich progress bar on stderr, or nothing when progress is off."""

    def __init__(self, enabled: bool, description: str, total: int) -> None:
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        if enabled:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.task = self.progress.add_task(description, total=total)

    def __enter__(self) -> _Bar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, n: int = 1) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, n)


def resolve_reward(reward: RewardSpec, name: str | None = None) -> ProgrammaticReward | SqlReward | str:
    """`"ruler"` stays a string; names and import paths become `ProgrammaticReward`s."""
    if isinstance(reward, (ProgrammaticReward, SqlReward)):
        return reward
    if not isinstance(reward, str) or not reward.strip():
        raise RewardSpecError(repr(reward), "give `ruler`, a built-in name or `package.module:function`")
    if reward.strip() == "ruler":
        return "ruler"
    return get_reward(reward, name)


def score(
    lake: store.Lake | str | os.PathLike[str],
    reward: RewardSpec,
    config: ScoreConfig | None = None,
    judge: JudgeConfig | None = None,
) -> ScoreSummary:
    """Score the selected trajectories of `lake` with one reward and write the `rewards` rows.

    >>> score("lake", "exact_match", ScoreConfig(where="split = 'val'"))  # doctest: +SKIP
    >>> score("lake", "ruler", judge=JudgeConfig(model="o3"))  # doctest: +SKIP
    """
    lake = store.Lake.of(lake)
    config = config or ScoreConfig()
    resolved = resolve_reward(reward, config.name)
    run_id = config.run_id or store.new_run_id("score")
    started = time.monotonic()
    if isinstance(resolved, str):  # "ruler"
        if judge is None:
            raise RewardSpecError("ruler", "RULER needs a judge: pass JudgeConfig(model=..., base_url=...)")
        summary = _score_ruler(lake, judge, config, run_id)
    elif isinstance(resolved, SqlReward):
        summary = _score_sql(lake, resolved, config, run_id)
    else:
        summary = _score_function(lake, resolved, config, run_id)
    summary.seconds = time.monotonic() - started
    return summary


def _finish(summary: ScoreSummary, writer: RewardWriter) -> ScoreSummary:
    summary.rows_written = writer.rows_written
    summary.failures = count_failures(writer.written)
    summary.values = value_stats(writer.written)
    by_traj_failed = {r["trajectory_id"] for r in writer.written if r["status"] == "failed"}
    by_traj = {r["trajectory_id"] for r in writer.written}
    summary.trajectories_failed = len(by_traj_failed)
    summary.trajectories_scored = len(by_traj - by_traj_failed)
    groups: dict[str, bool] = {}
    for r in writer.written:
        gid = r["group_id"] or r["trajectory_id"]
        groups[gid] = groups.get(gid, True) and r["status"] == "ok"
    if summary.kind != "ruler":
        summary.groups_scored = sum(groups.values())
        summary.groups_failed = len(groups) - summary.groups_scored
    return summary


# --- programmatic rewards --------------------------------------------------------------------


def _score_function(
    lake: store.Lake, reward: ProgrammaticReward, config: ScoreConfig, run_id: str
) -> ScoreSummary:
    con = store.connect(lake)
    total, done = count_trajectories(con, config.where, reward.scorer)
    todo = total if config.force else total - done
    summary = ScoreSummary(reward.name, reward.scorer, run_id, "function", trajectories_skipped=total - todo)
    writer = RewardWriter(lake, config.flush_every * 64, config.flush_interval_s)
    meta = {"kind": "function", "path": reward.path, "version": reward.version}
    scenarios: dict[str, dict[str, Any]] = {}
    stream = stream_trajectories(con, config.where, reward.scorer, config.force, config.load_turns)
    scenario_con = store.connect(lake)  # the stream holds `con` open; scenarios are read beside it
    bar = _Bar(config.progress, reward.name, todo)
    with bar:
        try:
            while batch := list(itertools.islice(stream, 2048)):
                wanted = {t["scenario_id"] for t in batch if t.get("scenario_id")} - scenarios.keys()
                scenarios.update(load_scenarios(scenario_con, wanted))
                scored_at = store.utc_now()
                out = []
                for traj in batch:
                    scenario = scenarios.get(traj["scenario_id"]) if traj.get("scenario_id") else None
                    for outcome in evaluate_reward(reward, traj, scenario):
                        out.append(
                            reward_row(
                                traj["trajectory_id"],
                                outcome.name,
                                reward.scorer,
                                value=outcome.value,
                                status=outcome.status,
                                error=outcome.error,
                                explanation=outcome.explanation,
                                group_id=traj.get("group_id"),
                                run_id=run_id,
                                scored_at=scored_at,
                                metadata=meta,
                            )
                        )
                writer.add(out, groups=len(batch))
                bar.advance(len(batch))
        finally:
            writer.flush()
    summary.groups_selected = len({r["group_id"] or r["trajectory_id"] for r in writer.written})
    return _finish(summary, writer)


# --- SQL rewards -----------------------------------------------------------------------------


def _score_sql(lake: store.Lake, reward: SqlReward, config: ScoreConfig, run_id: str) -> ScoreSummary:
    con = store.connect(lake)
    summary = ScoreSummary(config.name or reward.name, reward.scorer, run_id, "sql")
    name = config.name or reward.name
    query = sql_reward_query(reward, candidates_sql(), where_clause(config.where), config.force, DONE)
    total_sql = f"WITH candidates AS ({candidates_sql()}) SELECT count(*) FROM candidates {where_clause(config.where)}"
    total = run_checked(con, total_sql, user_sql=config.where or "")[0][0]
    # Evaluate the whole expression before writing anything: a runtime error (a bad cast
    # in row 9,000) must not leave the first rows written. Three narrow columns fit in memory.
    try:
        check_read_only(con, query)
        result = con.sql(query, params=None if config.force else {"scorer": reward.scorer}).to_arrow_table()
    except Exception as exc:  # duckdb errors of any kind, ReadOnlyViolation
        raise SqlRewardError(reward.expression, f"{type(exc).__name__}: {exc}") from None
    reader = result.to_batches(max_chunksize=4096)
    writer = RewardWriter(lake, config.flush_every * 64, config.flush_interval_s)
    meta = {"kind": "sql", "expression": reward.expression}
    seen = 0
    bar = _Bar(config.progress, name, total)
    with bar:
        try:
            for batch in reader:
                scored_at = store.utc_now()
                rows = []
                for r in batch.to_pylist():
                    error, explanation = _sql_value_problem(r["value"])
                    rows.append(
                        reward_row(
                            r["trajectory_id"],
                            name,
                            reward.scorer,
                            value=None if error else r["value"],
                            status="failed" if error else "ok",
                            error=error,
                            explanation=explanation,
                            group_id=r["group_id"],
                            run_id=run_id,
                            scored_at=scored_at,
                            metadata=meta,
                        )
                    )
                seen += len(rows)
                writer.add(rows, groups=len(rows))
                bar.advance(len(rows))
        finally:
            writer.flush()
    summary.trajectories_skipped = total - seen
    summary.groups_selected = len({r["group_id"] or r["trajectory_id"] for r in writer.written})
    return _finish(summary, writer)


def _sql_value_problem(value: float | None) -> tuple[str | None, str | None]:
    """(reason, explanation) when a SQL reward value cannot be recorded as a score, else (None, None).

    NULL and non-finite results (`sqrt(-1)`, `1.0/0`) are failures, as for programmatic rewards.
    """
    if value is None:
        return "null_value", "the SQL expression returned NULL"
    if not math.isfinite(value):
        return "invalid_value", f"the SQL expression returned {value!r}"
    return None, None


# --- RULER -----------------------------------------------------------------------------------


def ruler_rows(
    verdict: GroupVerdict, judge: RulerJudge, name: str, run_id: str, group_id: str
) -> list[dict[str, Any]]:
    """The rows of one judged group: one per trajectory, scores or the group's failure."""
    scored_at = store.utc_now()
    base = {
        "kind": "ruler",
        "judge_model": judge.config.model,
        "rubric_hash": judge.rubric_hash,
        "seed": verdict.seed,
        "group_size": len(verdict.trajectory_ids),
        "cached": verdict.cached,
        "attempts": verdict.attempts,
        "truncated": verdict.truncated,
        "prompt_tokens": verdict.prompt_tokens,
        "completion_tokens": verdict.completion_tokens,
        "cost_usd": verdict.cost_usd,
    }
    if verdict.retry_reasons:
        base["retry_reasons"] = verdict.retry_reasons
    rows = []
    for tid in verdict.trajectory_ids:
        if verdict.ok:
            v = verdict.verdicts[tid]
            rows.append(
                reward_row(
                    tid,
                    name,
                    judge.scorer,
                    value=v.score,
                    status="ok",
                    explanation=v.explanation,
                    group_id=group_id,
                    run_id=run_id,
                    scored_at=scored_at,
                    metadata={**base, "label": v.label},
                )
            )
        else:
            rows.append(
                reward_row(
                    tid,
                    name,
                    judge.scorer,
                    value=None,
                    status="failed",
                    error=verdict.error,
                    explanation=verdict.error_detail,
                    group_id=group_id,
                    run_id=run_id,
                    scored_at=scored_at,
                    metadata=base,
                )
            )
    return rows


def _score_ruler(
    lake: store.Lake, judge_config: JudgeConfig, config: ScoreConfig, run_id: str
) -> ScoreSummary:
    judge = RulerJudge(judge_config, JudgeCache(lake))
    name = config.name or "ruler"
    con = store.connect(lake)
    groups, done, small = selected_groups(
        con, config.where, judge.scorer, config.force, config.min_group_size
    )
    if config.limit_groups is not None:
        groups = groups[: config.limit_groups]
    summary = ScoreSummary(
        name,
        judge.scorer,
        run_id,
        "ruler",
        groups_selected=len(groups) + done + small,
        groups_skipped=done,
        groups_too_small=small,
    )
    if small:
        summary.notes.append(
            f"{small} group(s) smaller than min_group_size={config.min_group_size} were not judged"
        )
    writer = RewardWriter(lake, config.flush_every, config.flush_interval_s)
    bar = _Bar(config.progress, f"{name} ({judge_config.model})", len(groups))

    stream = stream_groups(con, [g for g, _ in groups], config.load_turns)

    async def run() -> None:
        # Keep a bounded window of groups in flight: enough to saturate `concurrency`, without
        # loading every group into memory at once.
        window = judge_config.concurrency * 2
        pending: dict[asyncio.Task[GroupVerdict], str] = {}
        exhausted = False
        unreachable = 0  # groups in a row that could not reach the judge at all
        try:
            while pending or not exhausted:
                while not exhausted and len(pending) < window:
                    # DuckDB reads (a chunk of groups at a time) run off the event loop, so judge
                    # calls in flight keep being served meanwhile.
                    item = await asyncio.to_thread(next, stream, None)
                    if item is None:
                        exhausted = True
                        break
                    gid, members = item
                    pending[asyncio.ensure_future(judge.score_group(gid, members))] = gid
                if not pending:
                    break
                finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in finished:
                    gid = pending.pop(fut)
                    verdict = fut.result()  # JudgeConfigError stops the run here
                    unreachable = unreachable + 1 if verdict.error == "judge_unreachable" else 0
                    if verdict.ok:
                        summary.groups_scored += 1
                    else:
                        summary.groups_failed += 1
                    summary.prompt_tokens += 0 if verdict.cached else verdict.prompt_tokens
                    summary.completion_tokens += 0 if verdict.cached else verdict.completion_tokens
                    if verdict.cost_usd is not None and not verdict.cached:
                        summary.cost_usd = (summary.cost_usd or 0.0) + verdict.cost_usd
                    if writer.add(ruler_rows(verdict, judge, name, run_id, gid), auto_flush=False):
                        await asyncio.to_thread(writer.flush)  # the Parquet commit, off the event loop
                    bar.advance()
                    if unreachable >= UNREACHABLE_STOP:
                        raise JudgeUnreachableError(
                            judge_config.model, judge_config.base_url, unreachable, verdict.error_detail or ""
                        )
        finally:
            for fut in pending:
                fut.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            await judge.aclose()

    with bar:
        try:
            run_sync(run())
        finally:
            writer.flush()
    summary.judge_calls, summary.cache_hits = judge.calls, judge.cache_hits
    if judge.fell_back_to_text:
        summary.notes.append("the judge rejected response_format json_schema; used the tolerant text parser")
    return _finish(summary, writer)
