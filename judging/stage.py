"""The scoring stage: read what needs scores from the lake, score it, write `rewards`, summarise.

`score(lake, reward, config=ScoreConfig(), judge=JudgeConfig(...))` is the one entry
point; the CLI and the Prefect flows call it. `reward` is `"ruler"`, a built-in name,
`"package.module:function"`, a `ProgrammaticReward` or a `SqlReward`.

Resumable and idempotent by construction:

- what the same `scorer` already scored successfully is skipped (failed rows are retried);
- without a `where` of its own, a run scores what its reward can score (`needs_expected`:
  replays of scenarios with an expected outcome) and counts what it left out, rather than
  writing a failed row for each production trace on every run;
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

import itertools
import math
import os
import time
from typing import Any

from judging.config import JudgeConfig, ScoreConfig
from judging.errors import RewardSpecError, SqlRewardError
from judging.registry import ProgrammaticReward, evaluate_reward, get_reward
from judging.ruler.stage import score_ruler
from judging.select import (
    DONE,
    candidates_sql,
    count_trajectories,
    run_checked,
    scenarios_by_id,
    stream_trajectories,
    where_clause,
)
from judging.sql_reward import SqlReward, sql_reward_query
from judging.summary import ScoreSummary
from judging.writer import ProgressBar, RewardWriter, finish_summary, reward_row
from store.catalog import check_read_only
from store.catalog.connection import connect
from store.lake import Lake
from store.rows import new_run_id, utc_now

RewardSpec = str | ProgrammaticReward | SqlReward


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
    lake: Lake | str | os.PathLike[str],
    reward: RewardSpec,
    config: ScoreConfig | None = None,
    judge: JudgeConfig | None = None,
) -> ScoreSummary:
    """Score the selected trajectories of `lake` with one reward and write the `rewards` rows.

    >>> score("lake", "exact_match", ScoreConfig(where="split = 'val'"))  # doctest: +SKIP
    >>> score("lake", "ruler", judge=JudgeConfig(model="o3"))  # doctest: +SKIP
    """
    lake = Lake.of(lake)
    config = config or ScoreConfig()
    resolved = resolve_reward(reward, config.name)
    run_id = config.run_id or new_run_id("score")
    started = time.monotonic()
    if isinstance(resolved, str):  # "ruler"
        if judge is None:
            raise RewardSpecError("ruler", "RULER needs a judge: pass JudgeConfig(model=..., base_url=...)")
        summary = score_ruler(lake, judge, config, run_id)
    elif isinstance(resolved, SqlReward):
        summary = _score_sql(lake, resolved, config, run_id)
    else:
        summary = _score_function(lake, resolved, config, run_id)
    summary.seconds = time.monotonic() - started
    return summary


# --- programmatic rewards --------------------------------------------------------------------


def _score_function(lake: Lake, reward: ProgrammaticReward, config: ScoreConfig, run_id: str) -> ScoreSummary:
    con = connect(lake)
    # Without a `where` of the run's own, a reward that declares what it can score scores only that.
    scope = reward.scope if not (config.where and config.where.strip()) else None
    where = scope.where if scope else config.where
    total, done = count_trajectories(con, where, reward.scorer)
    todo = total if config.force else total - done
    summary = ScoreSummary(reward.name, reward.scorer, run_id, "function", trajectories_skipped=total - todo)
    if scope:
        left_out = count_trajectories(con, None, reward.scorer)[0] - total
        summary.trajectories_out_of_scope = left_out
        if left_out:
            summary.notes.append(
                f"left out {left_out} trajectories it cannot score (it scores {scope.meaning}); "
                "`--where true` scores them too"
            )
    writer = RewardWriter(lake, config.flush_every * 64, config.flush_interval_s)
    meta = {"kind": "function", "path": reward.path, "version": reward.version}
    scenarios: dict[str, dict[str, Any]] = {}
    stream = stream_trajectories(con, where, reward.scorer, config.force, config.load_turns)
    scenario_con = connect(lake)  # the stream holds `con` open; scenarios are read beside it
    bar = ProgressBar(config.progress, reward.name, todo)
    with bar:
        try:
            while batch := list(itertools.islice(stream, 2048)):
                wanted = {t["scenario_id"] for t in batch if t.get("scenario_id")} - scenarios.keys()
                scenarios.update(scenarios_by_id(scenario_con, wanted))
                scored_at = utc_now()
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
    return finish_summary(summary, writer)


# --- SQL rewards -----------------------------------------------------------------------------


def _score_sql(lake: Lake, reward: SqlReward, config: ScoreConfig, run_id: str) -> ScoreSummary:
    con = connect(lake)
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
    bar = ProgressBar(config.progress, name, total)
    with bar:
        try:
            for batch in reader:
                scored_at = utc_now()
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
    return finish_summary(summary, writer)


def _sql_value_problem(value: float | None) -> tuple[str | None, str | None]:
    """(reason, explanation) when a SQL reward value cannot be recorded as a score, else (None, None).

    NULL and non-finite results (`sqrt(-1)`, `1.0/0`) are failures, as for programmatic rewards.
    """
    if value is None:
        return "null_value", "the SQL expression returned NULL"
    if not math.isfinite(value):
        return "invalid_value", f"the SQL expression returned {value!r}"
    return None, None
