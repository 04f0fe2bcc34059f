"""RULER as a scoring run: whole groups to the judge, concurrently, verdicts cached and written.

Groups are judged `JudgeConfig.concurrency` at a time; each verdict is cached the moment
it arrives (`judging.ruler.cache`), rows are committed in batches (`judging.writer`), and
a group that still fails after its retries is written as `status = 'failed'` rows with
the reason. After `UNREACHABLE_STOP` groups in a row fail with `judge_unreachable`, the
endpoint is down: the run stops instead of recording the same failure for every group.
"""

from __future__ import annotations

import asyncio
from typing import Any

from judging.config import JudgeConfig, ScoreConfig
from judging.errors import JudgeUnreachableError
from judging.ruler.cache import JudgeCache
from judging.ruler.group import GroupVerdict, RulerJudge, run_sync
from judging.select import selected_groups, stream_groups
from judging.summary import ScoreSummary
from judging.writer import ProgressBar, RewardWriter, finish_summary, reward_row
from store.catalog.connection import connect
from store.lake import Lake
from store.rows import utc_now

# After this many groups in a row fail with `judge_unreachable` (retries included), the
# endpoint is down: stop instead of recording the same failure for every remaining group.
UNREACHABLE_STOP = 3


def ruler_rows(
    verdict: GroupVerdict, judge: RulerJudge, name: str, run_id: str, group_id: str
) -> list[dict[str, Any]]:
    """The rows of one judged group: one per trajectory, scores or the group's failure."""
    scored_at = utc_now()
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


def score_ruler(lake: Lake, judge_config: JudgeConfig, config: ScoreConfig, run_id: str) -> ScoreSummary:
    judge = RulerJudge(judge_config, JudgeCache(lake))
    name = config.name or "ruler"
    con = connect(lake)
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
    bar = ProgressBar(config.progress, f"{name} ({judge_config.model})", len(groups))

    stream = stream_groups(con, [g for g, _ in groups], config.load_turns)

    def record(gid: str, verdict: GroupVerdict) -> bool:
        """Count a verdict and hand its rows to the writer; whether the writer wants a flush."""
        if verdict.ok:
            summary.groups_scored += 1
        else:
            summary.groups_failed += 1
        summary.prompt_tokens += 0 if verdict.cached else verdict.prompt_tokens
        summary.completion_tokens += 0 if verdict.cached else verdict.completion_tokens
        if verdict.cost_usd is not None and not verdict.cached:
            summary.cost_usd = (summary.cost_usd or 0.0) + verdict.cost_usd
        bar.advance()
        return writer.add(ruler_rows(verdict, judge, name, run_id, gid), auto_flush=False)

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
                    if record(gid, verdict):
                        await asyncio.to_thread(writer.flush)  # the Parquet commit, off the event loop
                    if unreachable >= UNREACHABLE_STOP:
                        raise JudgeUnreachableError(
                            judge_config.model, judge_config.base_url, unreachable, verdict.error_detail or ""
                        )
        finally:
            # Stopped (Ctrl-C, an error): verdicts already back are kept (the writer's last flush
            # commits them); only the calls still in flight are cancelled.
            for fut, gid in pending.items():
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    record(gid, fut.result())
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
    return finish_summary(summary, writer)
