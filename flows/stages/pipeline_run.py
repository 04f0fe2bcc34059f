"""A pipeline run's own record: where it starts, what it learns from, what it trained and decided.

A scheduled pipeline runs night after night on one lake, so each run must know what the
previous ones did (`store.pipeline_runs.PipelineRun` rows in `runs`):

- **its own folder**: the run id is the Prefect flow run's id, so a retried flow run finds
  its record and resumes its own checkpoints, and a new run never resumes a finished one;
- **where it starts** (`pipeline.start_from`): the adapter holding `production` (its lineage
  extended; SFT only with `pipeline.sft_on_production`), or the base model with SFT;
- **what it learns from**: the scenarios new since the last finished run plus
  `pipeline.window_days` before it (`store.selections.scenarios_since`), replayed with the policy it
  trains, so a scenario seen before comes back with each new policy; a night that brought
  no new scenario trains nothing, whatever the window (the window's older scenarios were
  learned from already, and the same data would give the candidate the gate just judged);
- **what it decided**: the gate's decision with its numbers, kept on the record for the
  report and the next run; a run that failed says so, with the step and the error.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.config.sections import PipelineSettings, Selections
from flows.stages.replay import run_scenarios
from store.catalog.connection import check_selection, connect
from store.catalog.versions import snapshot
from store.errors import LegacyRows
from store.lake import Lake
from store.migrate import require_migrated
from store.pipeline_runs import (
    PipelineRun,
    last_finished_run,
    learning_since,
    pipeline_runs,
    record_pipeline_run,
)
from store.rows import utc_now
from store.selections import (
    scenarios_since,
    scenarios_with_expected,
    trajectories_not_replayed,
    trajectories_since,
)
from training.publish import PublishConfig
from training.run import CHECKPOINTS

if TYPE_CHECKING:
    from flows.stages.evaluate import Publication
    from judging.evaluate import Evaluation
    from training.run import TrainResult


def pipeline_run_id(flow_run_id: str | None) -> str:
    """The pipeline run's id: its flow run's (a retry keeps it), else a fresh one."""
    return f"pipeline-{flow_run_id or uuid.uuid4()}"


def production_adapter(lake: Lake, publish: PublishConfig) -> tuple[str, str] | None:
    """(`name:vN`, folder) of the adapter holding `production` under `publish.name`, if any."""
    from training.errors import AdapterNotFound
    from training.registry import PRODUCTION, resolve_adapter

    name = publish.name
    try:
        row = resolve_adapter(lake, f"{name}:{PRODUCTION}")
    except AdapterNotFound:
        return None
    return f"{name}:v{row['version']}", str(row["path"])


#: The step a run that could not begin failed at (`refuse_pipeline_run`)
START_STEP = "start"


def begin_pipeline_run(
    lake: Lake, flow_run_id: str | None, *, pipeline: PipelineSettings, publish: PublishConfig
) -> PipelineRun:
    """Record the run's start (or, for a retried flow run, take up its record as it began).

    A lake holding rows an older trajlake wrote without the typed columns a run builds on (the
    previous runs' records, replayed groups' sampling) is refused before anything is recorded
    (`store.LegacyRows`, naming `trajlake migrate`; `refuse_pipeline_run` records why). Where it
    starts is `pipeline.start_from` (the adapter holding `production` under `publish.name`).
    """
    require_migrated(lake)
    run_id = pipeline_run_id(flow_run_id)
    for earlier in pipeline_runs(lake):
        if earlier.run_id == run_id and not _never_began(earlier):
            if earlier.status == "failed":  # retried after a failure: running again
                earlier = replace(earlier, status="running", error=None, finished_at=None)
                record_pipeline_run(lake, earlier)
            return earlier
    previous = last_finished_run(lake)
    start = production_adapter(lake, publish) if pipeline.start_from == "production" else None
    since = learning_since(previous, pipeline.window_days)
    run = PipelineRun(
        run_id=run_id,
        started_at=utc_now().isoformat(),
        flow_run_id=flow_run_id,
        start_from=pipeline.start_from,
        start_adapter=start[0] if start else None,
        start_adapter_path=start[1] if start else None,
        sft=pipeline.sft_on_production if start else pipeline.sft,
        since=since.isoformat() if since else None,
        new_since=previous.data_until if previous else None,
        previous_run=previous.run_id if previous else None,
        table_versions={name: v.version for name, v in snapshot(lake).items() if v.version is not None},
    )
    record_pipeline_run(lake, run)
    return run


def refuse_pipeline_run(
    lake: Lake, flow_run_id: str | None, error: LegacyRows, *, pipeline: PipelineSettings
) -> PipelineRun:
    """Record a run that could not begin (`begin_pipeline_run` refused the lake): failed at
    `start` with the reason, the report and `trajlake pipeline` show it. A retry of the same
    flow run after `trajlake migrate` begins afresh."""
    run = PipelineRun(
        run_id=pipeline_run_id(flow_run_id),
        started_at=utc_now().isoformat(),
        flow_run_id=flow_run_id,
        start_from=pipeline.start_from,
    )
    return fail_pipeline_run(lake, run, START_STEP, error)


def _never_began(run: PipelineRun) -> bool:
    return run.status == "failed" and (run.error or "").startswith(f"{START_STEP}: ")


def mark_data_seen(lake: Lake, run: PipelineRun) -> PipelineRun:
    """After the scenarios step: what exists now is this run's data; the next run's starts after."""
    if run.data_until:
        return run  # a retried run keeps the line it drew
    run = replace(run, data_until=utc_now().isoformat())
    record_pipeline_run(lake, run)
    return run


def learning_selections(run: PipelineRun, select: Selections, *, expected_only: bool = False) -> Selections:
    """The selections kept to what `run` learns from: the replayed scenarios to its window, and to
    those with an expected outcome when the training reward needs one (`expected_only`,
    `training_reward_needs_expected`); SFT to its window only when it continues the production
    adapter (from the base model, SFT reads all selected conversations)."""
    since = run.since_time
    sft = trajectories_since(select.sft, since) if run.start_adapter else select.sft
    replay = scenarios_since(select.replay, since)
    if expected_only:
        replay = scenarios_with_expected(replay)
    return dataclasses.replace(select, replay=replay, sft=sft)


def sft_selections(lake: Lake, select: Selections, rounds: int, *, pipeline: PipelineSettings) -> Selections:
    """`select` (the run's learning selections) for its SFT: with `pipeline.sft_excludes_replayed`,
    `select.sft` without the conversations the run's `rounds` rounds replay as scenarios, so that
    GRPO samples questions the SFT policy did not learn by heart."""
    if not pipeline.sft_excludes_replayed:
        return select
    replayed = run_scenarios(lake, rounds, select=select, pipeline=pipeline)
    return dataclasses.replace(select, sft=trajectories_not_replayed(select.sft, replayed))


def origin_of(run: PipelineRun) -> dict[str, Any]:
    """What a version published by `run` records of how it came about (`training.publish`'s origin)."""
    return {
        "pipeline_run": run.run_id,
        "start_from": run.start_from,
        "started_from": run.start_adapter or "base model",
        "sft": run.sft,
        "learned_since": run.since,
    }


def nothing_to_learn(lake: Lake, run: PipelineRun, *, select: Selections) -> str | None:
    """Why `run` trains nothing, or None when it has something to learn.

    `select` is the run's learning selections (`learning_selections`). A later run needs a train
    scenario made since the previous finished run's data (`run.new_since`), whatever its window:
    with none, the window holds only scenarios that run learned from, and training on them again
    would give again the candidate the gate has just judged.
    """
    if run.new_since and not scenarios_to_learn(
        lake, scenarios_since(select.replay, datetime.fromisoformat(run.new_since))
    ):
        return f"nothing to learn: no train scenario new since {run.new_since}"
    if not scenarios_to_learn(lake, select.replay):
        if run.since:
            return f"nothing to learn: no train scenario new since {run.since}"
        return "nothing to learn: `select.replay` selects no scenario the training reward can score"
    return None


def scenarios_to_learn(lake: Lake, selection: str) -> int:
    """How many scenarios `selection` (returning `scenario_id`) holds."""
    with connect(lake, read_only=True) as con:
        text, _ = check_selection(con, selection, "scenario_id")
        (count,) = con.execute(f"SELECT count(DISTINCT scenario_id) FROM ({text})").fetchone() or (0,)
        return int(count)


def record_learned_from(lake: Lake, run: PipelineRun, *, select: Selections) -> PipelineRun:
    """`run` with what its (windowed) replay selection holds, by what production said of each
    scenario's conversation: rated right, failures with a label, failures without one (recorded);
    nothing when the run has nothing to learn (`nothing_to_learn`: its window is all seen)."""
    keys = ("scenarios", "rated_right", "failures", "failures_labelled", "failures_unlabelled", "unrated")
    if nothing_to_learn(lake, run, select=select):
        run = replace(run, learned_from=dict.fromkeys(keys, 0))
        record_pipeline_run(lake, run)
        return run
    with connect(lake, read_only=True) as con:
        text, _ = check_selection(con, select.replay, "scenario_id")
        row = con.execute(
            f"""
            SELECT count(*),
                   count(*) FILTER (WHERE rated = 'right'),
                   count(*) FILTER (WHERE rated = 'wrong'),
                   count(*) FILTER (WHERE rated = 'wrong' AND expected_source = 'label'),
                   count(*) FILTER (WHERE rated = 'wrong' AND expected IS NULL),
                   count(*) FILTER (WHERE rated IS NULL)
            FROM scenarios WHERE scenario_id IN (SELECT scenario_id FROM ({text}))
            """
        ).fetchone() or (0, 0, 0, 0, 0, 0)
    run = replace(run, learned_from=dict(zip(keys, map(int, row), strict=True)))
    record_pipeline_run(lake, run)
    return run


def finish_pipeline_run(
    lake: Lake,
    run: PipelineRun,
    *,
    pipeline: PipelineSettings,
    trained: list[TrainResult],
    publication: Publication | None = None,
    evaluation: Evaluation | None = None,
    decision: str | None = None,
    replay_failed: int = 0,
) -> PipelineRun:
    """Record the run as finished: its training runs and steps, the version it published and the
    gate's decision (or why nothing was trained), and in `learned_from` the `replay_failed`
    scenarios its rounds could not replay; its checkpoints go unless `pipeline.keep_checkpoints`."""
    gate = publication.gate if publication else None
    run = replace(
        run,
        learned_from={**run.learned_from, "replay_failed": replay_failed}
        if replay_failed
        else run.learned_from,
        status="finished",
        finished_at=utc_now().isoformat(),
        training_runs=[t.run_id for t in trained],
        training_steps=sum(t.global_step for t in trained),
        adapter=trained[-1].adapter_dir if trained else None,
        published=publication.ref if publication else None,
        promoted=gate.promoted if gate else None,
        decision=(publication.decision if publication else None) or decision,
        eval_run_id=evaluation.run_id if evaluation else None,
    )
    record_pipeline_run(lake, run)
    if not pipeline.keep_checkpoints:
        drop_checkpoints(trained)
    return run


def fail_pipeline_run(lake: Lake, run: PipelineRun, step: str, error: BaseException) -> PipelineRun:
    """Record the run as failed at `step` with `error` in one line (the flow then raises it as it was):
    the report shows why, and the next run learns from what this one did not finish."""
    first_line = (str(error).strip().splitlines() or [""])[0][:500]
    run = replace(
        run,
        status="failed",
        finished_at=utc_now().isoformat(),
        error=f"{step}: {type(error).__name__}" + (f": {first_line}" if first_line else ""),
    )
    record_pipeline_run(lake, run)
    return run


def drop_checkpoints(trained: list[TrainResult]) -> None:
    """Delete a finished run's training checkpoints (no resume needs them any more); the adapters
    stay, since lineage names them."""
    for stage in trained:
        shutil.rmtree(Path(stage.adapter_dir).parent / CHECKPOINTS, ignore_errors=True)
