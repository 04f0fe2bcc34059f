"""The ingest flow: pull from Langfuse (when configured), assemble pending traces, apply retention."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from flows import stages
from flows.prefect_flows.tasks import assemble_task, flow_settings, pull_langfuse_task, retention_task


@flow(name="trajlake-ingest")
def ingest_flow(
    config_file: str | None = None, lake: str | None = None, sql_lake_only: bool = False
) -> dict[str, int]:
    """Pull new traces from Langfuse (when configured) and assemble pending traces.

    `sql_lake_only` forces `lake.sql_lake_only` on whatever the config says (`trajlake serve`'s runs).
    """
    config = flow_settings(config_file, lake, sql_lake_only)
    the_lake = stages.lake_of(config.lake)
    counts = {"langfuse_trajectories": 0}
    if config.pipeline.langfuse:
        counts["langfuse_trajectories"] = pull_langfuse_task(the_lake, config.langfuse)
    counts["assembled_trajectories"] = assemble_task(the_lake)
    counts["retention_erased_trajectories"] = retention_task(the_lake, config.retention)
    get_run_logger().info("ingest: %s", ", ".join(f"{k} {v}" for k, v in counts.items()))
    create_table_artifact([{"stage": k, "rows": v} for k, v in counts.items()], key="trajlake-ingest")
    return counts
