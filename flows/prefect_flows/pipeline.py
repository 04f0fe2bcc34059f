"""The pipeline flow: ingest, scenarios, SFT, N rounds of replay -> score -> GRPO, evaluate, publish.

Each step is a task of `flows.prefect_flows.tasks`, timed and logged (`_Steps`); the run's record
(`store.pipeline_runs`) says what it learned from, what it trained and what the gate decided.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from prefect import flow, get_run_logger, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.states import Failed

from flows import progress, stages
from flows.config.root import Settings
from flows.config.sections import Selections
from flows.prefect_flows.tasks import (
    assemble_task,
    evaluate_task,
    finish_scoring_task,
    flow_settings,
    grpo_task,
    publish_task,
    pull_langfuse_task,
    replay_task,
    report_task,
    scenarios_task,
    score_reward_task,
    sft_task,
    task_runner,
)
from store.errors import LegacyRows
from store.lake import Lake
from store.pipeline_runs import PipelineRun

if TYPE_CHECKING:
    from judging.evaluate import Evaluation
    from training.run import TrainResult

P = ParamSpec("P")
R = TypeVar("R")


def _replay(
    config: Settings,
    lake: Lake,
    select: Selections,
    adapter: str | None,
    round_number: int,
    draw: int = 0,
) -> stages.PolicyReplay:
    """A round's replay of the scenarios `select` picks: one task, or `pipeline.replay_shards` tasks
    by scenario (on the runner's workers), their results merged."""
    shards = config.pipeline.replay_shards
    replaying = stages.ReplaySections.of(config)
    if shards <= 1:
        return replay_task(
            lake, adapter, round_number, draw, select=select, pipeline=config.pipeline, replaying=replaying
        )
    futures = replay_task.map(
        unmapped(lake),
        unmapped(adapter),
        unmapped(round_number),
        unmapped(draw),
        range(shards),
        unmapped(shards),
        select=unmapped(select),
        pipeline=unmapped(config.pipeline),
        replaying=unmapped(replaying),
    )
    return stages.merge_shards([future.result() for future in futures])


def _score(config: Settings, lake: Lake, group_ids: list[str] | None) -> stages.RoundScores:
    """Each reward (and with `replay_shards`, each shard of the groups) as its own task, concurrently
    under the flow's task runner, then the combination."""
    rewards = stages.rewards_to_score(config.score)
    chunks = stages.shard_groups(group_ids, config.pipeline.replay_shards)
    pairs = [(reward, chunk) for reward in rewards for chunk in chunks]
    futures = score_reward_task.map(
        unmapped(lake), [r for r, _ in pairs], [c for _, c in pairs], judge=unmapped(config.judge)
    )
    runs = [future.result() for future in futures]
    stats = finish_scoring_task(lake, group_ids, score=config.score)
    create_table_artifact(
        stages.merge_score_rows(runs), key="trajlake-score", description="Scorers run on the replayed groups"
    )
    return stages.RoundScores(stats, runs)


@flow(name="trajlake-pipeline")
def pipeline_flow(
    config_file: str | None = None,
    lake: str | None = None,
    rounds: int | None = None,
    force_publish: bool = False,
    sql_lake_only: bool = False,
) -> dict[str, Any]:
    """The whole loop: ingest, scenarios, SFT, N rounds of replay -> score -> GRPO, evaluate, publish.

    Each run is its own (`flows.stages.pipeline_run`): it continues the production adapter (or
    the base model), learns from what is new since the last finished run, trains in its own
    folder, and records what it trained and what the gate decided; a step that raises leaves
    the record `failed` with the step and the error, and the flow run fails with it (a lake an
    older trajlake wrote fails it at `start`, naming `trajlake migrate`). Each round
    samples with the newest adapter, so GRPO stays close to on-policy. `sql_lake_only` forces
    `lake.sql_lake_only` on whatever the config says (`trajlake serve`'s runs).
    """
    from prefect.runtime import flow_run

    config = flow_settings(config_file, lake, sql_lake_only)
    stages.loadable_base_model(config.sampler)  # no base model: stop before ingesting or training anything
    the_lake = stages.lake_of(config.lake)
    progress.log_at_info()  # the trainers' loss lines reach the run's log (and a console that shows them)
    steps = _Steps(get_run_logger())
    try:
        run = stages.begin_pipeline_run(
            the_lake, flow_run.id, pipeline=config.pipeline, publish=config.publish
        )
    except LegacyRows as exc:
        # An older lake is the user's to migrate, not a fault of the flow: the run's record says
        # why in one line, and the flow run fails with it (a returned state: no traceback).
        refused = stages.refuse_pipeline_run(the_lake, flow_run.id, exc, pipeline=config.pipeline)
        steps.logger.error("pipeline run %s failed at %s", refused.run_id, refused.error)
        return Failed(message=str(exc))  # type: ignore[return-value]  # Prefect's way to fail a run
    steps.logger.info(
        "pipeline run %s: starts from %s, learns from %s",
        run.run_id,
        run.start_adapter or "the base model",
        f"what is new since {run.since}" if run.since else "everything selected",
    )
    try:
        return _pipeline_steps(config, the_lake, run, rounds or config.pipeline.rounds, force_publish, steps)
    except Exception as exc:
        latest = steps.run or run
        if latest.status != "finished":  # the report after a finished run failing leaves it finished
            failed = stages.fail_pipeline_run(the_lake, latest, steps.current, exc)
            steps.logger.error("pipeline run %s failed at %s", failed.run_id, failed.error)
        raise


class _Steps:
    """The flow's steps as they run: each timed (for the caller to show), logged to the run's log
    (the Prefect API) and to trajlake's console logger, and the current one named for a failure."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.timings: list[tuple[str, float]] = []  # wall seconds of each step
        self.current = "start"
        self.run: PipelineRun | None = None  # the newest state of the run's record

    def __call__(self, name: str, task_: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        self.current = name
        progress.step_started(name)
        start = time.perf_counter()
        out = task_(*args, **kwargs)
        seconds = round(time.perf_counter() - start, 2)
        self.timings.append((name, seconds))
        self.logger.info("%s: done in %.1f s", name, seconds)
        progress.step_finished(name, seconds)
        return out


def _pipeline_steps(
    config: Settings,
    lake: Lake,
    run: PipelineRun,
    rounds: int,
    force_publish: bool,
    timed: _Steps,
) -> dict[str, Any]:
    """`pipeline_flow`'s steps after the run's record began (any exception marks the run failed)."""
    logger = timed.logger
    if config.pipeline.langfuse:
        timed("pull langfuse", pull_langfuse_task, lake, config.langfuse)
    timed("assemble", assemble_task, lake)
    scenarios = timed("scenarios", scenarios_task, lake, select=config.select, scenarios=config.scenarios)
    run = timed.run = stages.mark_data_seen(lake, run)
    # `select` kept to the run's window, and to what the training reward can score
    learning = stages.learning_selections(
        run, config.select, expected_only=stages.training_reward_needs_expected(config.score)
    )
    run = timed.run = stages.record_learned_from(lake, run, select=learning)
    logger.info("learns from %s", run.learned_from)
    # the flow's result is JSON-able but for the run's record (Prefect keeps it; the demo reads it)
    result: dict[str, Any] = {
        "run": run,
        "rounds": [],
        "adapter": None,
        "scenarios": asdict(scenarios),
        "learned_from": run.learned_from,
    }
    reason = stages.nothing_to_learn(lake, run, select=learning)
    if reason:
        run = timed.run = stages.finish_pipeline_run(
            lake, run, pipeline=config.pipeline, trained=[], decision=reason
        )
        logger.info(reason)
        progress.decision(reason)
        return {**result, "run": run, "report": _report(config, lake, timed).path, "timings": timed.timings}

    trained: list[TrainResult] = []
    adapter = run.start_adapter_path
    sft_adapter = None
    if run.sft:
        trained.append(
            timed(
                "sft",
                sft_task,
                lake,
                run.run_id,
                0,
                adapter,
                select=stages.sft_selections(lake, learning, rounds, pipeline=config.pipeline),
                train=config.train,
                sampler=config.sampler,
                pipeline=config.pipeline,
            )
        )
        adapter = sft_adapter = trained[-1].adapter_dir
    round_adapters: list[str] = []
    for round_number in range(1, rounds + 1):
        replayed, scored = stages.sample_round(
            adapter,
            round_number,
            pipeline=config.pipeline,
            replay=lambda policy, n, draw: timed(
                f"round {n}: replay", _replay, config, lake, learning, policy, n, draw
            ),
            score=lambda ids, n: timed(f"round {n}: score", _score, config, lake, ids),
        )
        summary = stages.RoundSummary.of(round_number, replayed, scored.stats)
        result["rounds"].append(asdict(summary))
        logger.info(
            "round %s: policy %s, mean reward %.3f", round_number, summary.policy, summary.mean_reward
        )
        if replayed.failed:
            warning = replayed.failure_text(f"round {round_number}")
            logger.warning(warning)
            progress.warning(warning)
        if config.pipeline.grpo:
            step = f"round {round_number}: grpo"
            trained.append(
                timed(
                    step,
                    grpo_task,
                    lake,
                    run.run_id,
                    adapter,
                    round_number,
                    replayed.group_ids,
                    train=config.train,
                    score=config.score,
                    sampler=config.sampler,
                    pipeline=config.pipeline,
                )
            )
            adapter = trained[-1].adapter_dir
            round_adapters.append(adapter)
    create_table_artifact(
        result["rounds"], key="trajlake-rounds", description="Mean reward of each round's replayed groups"
    )
    publication: stages.Publication | None = None
    evaluation: Evaluation | None = None
    if trained:
        adapter = trained[-1].adapter_dir  # the candidate: the newest adapter trained
        start = (run.start_adapter, path) if run.start_adapter and (path := run.start_adapter_path) else None
        curve = (
            stages.stage_policies(
                sft_adapter, round_adapters, start, intermediate=config.evaluate.intermediate
            )
            if config.evaluate.stages
            else None
        )
        evaluation = timed(
            "evaluate",
            evaluate_task,
            lake,
            adapter,
            curve,
            publish=config.publish,
            evaluate=config.evaluate,
            select=config.select,
            score=config.score,
            judge=config.judge,
            replaying=stages.ReplaySections.of(config),
        )
        publication = timed(
            "publish",
            publish_task,
            lake,
            adapter,
            evaluation,
            force_publish,
            stages.origin_of(run),
            pipeline=config.pipeline,
            publish=config.publish,
            sampler=config.sampler,
        )
        if publication.published:
            record = stages.publication_record(publication.published)
            _publish_artifacts(record, evaluation.to_dict())
            result["published"] = record
        logger.info(publication.decision)
        progress.decision(publication.decision)
        result.update(evaluation=evaluation.to_dict(), adapter=adapter, decision=publication.decision)
    run = timed.run = stages.finish_pipeline_run(
        lake,
        run,
        pipeline=config.pipeline,
        trained=trained,
        publication=publication,
        evaluation=evaluation,
        decision=None if trained else "nothing trained: `pipeline.sft` and `pipeline.grpo` are off",
        replay_failed=sum(r["failed_scenarios"] for r in result["rounds"]),
    )
    result.update(run=run, report=_report(config, lake, timed).path, timings=timed.timings)
    return result


def _report(config: Settings, lake: Lake, timed: _Steps) -> stages.PipelineReport:
    """The lake's report after the run, linked from an artifact."""
    report: stages.PipelineReport = timed(
        "report", report_task, lake, sampler=config.sampler, pipeline=config.pipeline, score=config.score
    )
    create_markdown_artifact(
        f"## [The run's report]({Path(report.path).resolve().as_uri()})\n\n"
        f"`{report.path}`: the pipeline's runs and their decisions, learning per stage, reward per "
        f"round, sampler gap, production feedback, lineage, and {report.groups_shown} of "
        f"{report.groups} groups in the group viewer.",
        key="trajlake-report",
        description="The pipeline run's HTML report",
    )
    return report


def run_pipeline(
    config_file: str | None, lake: str, rounds: int | None = None, force_publish: bool = False
) -> dict[str, Any]:
    """`pipeline_flow` under the configured task runner (what `trajlake pipeline` and the demo call)."""
    config = flow_settings(config_file, lake)
    flow_with_runner = pipeline_flow.with_options(task_runner=task_runner(config))
    return flow_with_runner(config_file=config_file, lake=lake, rounds=rounds, force_publish=force_publish)


def _publish_artifacts(published: dict[str, Any], evaluation: dict[str, Any]) -> None:
    create_table_artifact(
        [
            {k: v for k, v in row.items() if k != "differences"}
            | {
                f"vs {d['against']}": f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
                for d in row["differences"]
            }
            for row in evaluation["table"]
        ],
        key="trajlake-evaluation",
        description="Success per stage (val scenarios) and per production policy, 95% CIs, paired differences",
    )
    lines = [
        f"## Adapter `{published['name']}` v{published['version']}",
        "",
        f"**{published['decision']}**",
        "",
    ]
    lines += [
        f"- **{k}**: `{v}`" for k, v in published.items() if k not in ("lineage_json", "gate", "decision")
    ]
    lines += ["", "### Lineage", "", "```json", published.get("lineage_json", "{}"), "```"]
    create_markdown_artifact(
        "\n".join(lines), key="trajlake-adapter", description="Published adapter and its lineage"
    )
