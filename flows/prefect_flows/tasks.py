"""The Prefect tasks the flows call (each a stage function of `flows.stages`) and the task runner.

Retries go where a retry can help: pulling from Langfuse (network) and scoring (judge
endpoints) retry with backoff; training and publishing do not (a retry would redo
minutes of work; the stages themselves resume from checkpoints and skip finished work).
Caching is off everywhere: every stage reads the lake, whose contents change between
runs, and is idempotent on its own (complete groups and scored trajectories are skipped),
so a Prefect cache could only serve stale answers.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from flows import stages
from flows.config.checks import load_config
from flows.config.root import Settings


def flow_settings(config_file: str | None, lake: str | None, sql_lake_only: bool = False) -> Settings:
    """The settings a flow run uses: the config file (plus the environment) with the run's lake, and
    `sql_lake_only` forced on where asked."""
    config = load_config(config_file).with_lake(lake)
    return config.with_values("lake", sql_lake_only=True) if sql_lake_only else config


def task_runner(config: Settings) -> Any:
    """The configured Prefect task runner (threads by default; Dask or Ray when installed)."""
    kind = config.pipeline.task_runner
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=config.pipeline.max_workers)
    module, cls, package = {
        "dask": ("prefect_dask", "DaskTaskRunner", "trajlake[dask]"),
        "ray": ("prefect_ray", "RayTaskRunner", "prefect-ray"),
    }[kind]
    try:
        runner_cls = getattr(__import__(module), cls)
    except ImportError:
        raise stages.StageError(
            "pipeline.task_runner", f"`{kind}` needs the `{package}` package: pip install {package}"
        ) from None
    if kind == "dask":
        if config.pipeline.dask_address:
            return runner_cls(address=config.pipeline.dask_address)
        # processes, one thread each: replay and training hold the GIL and torch's threads
        return runner_cls(
            cluster_kwargs={
                "n_workers": config.pipeline.max_workers,
                "threads_per_worker": 1,
                "processes": True,
            }
        )
    return runner_cls()


# --- tasks ------------------------------------------------------------------------------

_network: dict[str, Any] = {
    "retries": 3,
    "retry_delay_seconds": [5, 30, 120],
    "retry_jitter_factor": 0.5,
    "cache_policy": NO_CACHE,
}
_local: dict[str, Any] = {"cache_policy": NO_CACHE}

# `task(name=...)(fn)` rather than `task(fn, name=...)`: the same task, and typed by Prefect's stubs
pull_langfuse_task = task(name="pull-langfuse", **_network)(stages.pull_langfuse_stage)
assemble_task = task(name="assemble", **_local)(stages.assemble_pending)
retention_task = task(name="retention", **_local)(stages.retention_stage)
scenarios_task = task(name="scenarios", **_local)(stages.make_scenarios)
replay_task = task(name="replay", **_local)(stages.replay_round)
score_reward_task = task(name="score", **_network)(stages.score_reward)
finish_scoring_task = task(name="combine-rewards", **_local)(stages.finish_scoring)
sft_task = task(name="train-sft", **_local)(stages.sft_stage)
grpo_task = task(name="train-grpo", **_local)(stages.grpo_stage)
evaluate_task = task(name="evaluate", **_local)(stages.evaluate_adapter)
publish_task = task(name="publish", **_local)(stages.publish_adapter)
report_task = task(name="report", **_local)(stages.write_pipeline_report)
