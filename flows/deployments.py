"""`trajlake serve`: the Prefect deployments of the configuration, on their schedules.

Two deployments: `trajlake-ingest` (hourly by default: Langfuse pull and assembly) and
`trajlake-pipeline` (nightly by default: scenarios, SFT, replay/score/GRPO rounds,
evaluation, publishing). Both take only JSON-able parameters (the config file path and
lake), so the same deployments can run on a Prefect work pool elsewhere. Their runs take SQL
from whoever triggers them, so the parameters force `lake.sql_lake_only` on: the flow run, a
process of its own, gets it as an argument.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.config.root import Settings


@dataclass(frozen=True)
class DeploymentSpec:
    flow_name: str
    name: str
    cron: str
    timezone: str
    parameters: dict[str, Any]


def deployment_specs(config: Settings, config_file: str | None) -> list[DeploymentSpec]:
    """What `serve` registers: one spec per scheduled flow (pure, tested)."""
    parameters = {
        "config_file": str(Path(config_file).absolute()) if config_file else None,
        "lake": config.lake.path,
        "sql_lake_only": True,
    }
    tz = config.schedules.timezone
    return [
        DeploymentSpec("trajlake-ingest", "hourly-ingest", config.schedules.ingest, tz, parameters),
        DeploymentSpec("trajlake-pipeline", "nightly-pipeline", config.schedules.pipeline, tz, parameters),
    ]


def build_deployments(config: Settings, config_file: str | None) -> list[Any]:
    """Prefect `RunnerDeployment`s for the specs."""
    from prefect import Flow
    from prefect.schedules import Cron

    from flows.prefect_flows import ingest_flow, pipeline_flow

    flows: dict[str, Flow[..., Any]] = {"trajlake-ingest": ingest_flow, "trajlake-pipeline": pipeline_flow}
    return [
        flows[spec.flow_name].to_deployment(
            name=spec.name,
            schedule=Cron(spec.cron, timezone=spec.timezone),
            parameters=spec.parameters,
            tags=["trajlake"],
        )
        for spec in deployment_specs(config, config_file)
    ]


def serve_deployments(config: Settings, config_file: str | None, *, run_once: bool = False) -> list[str]:
    """Register the deployments and serve them until interrupted (or one poll with `run_once`).

    Returns the deployment names (`flow/deployment`).
    """
    from prefect.runner import Runner

    deployments = build_deployments(config, config_file)
    runner = Runner(name="trajlake", pause_on_shutdown=False)

    async def main() -> None:
        for deployment in deployments:
            await runner.aadd_deployment(deployment)
        await runner.start(run_once=run_once)

    asyncio.run(main())
    return [f"{d.flow_name}/{d.name}" for d in deployments]
