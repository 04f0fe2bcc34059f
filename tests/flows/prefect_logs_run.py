"""Run one small pipeline under a fresh Prefect API, as `trajlake pipeline` sets Prefect up, and print
the logs the API holds for the flow run and its task runs as JSON (`test_prefect_logs.py`).

A script of its own, run in a fresh process: Prefect reads its logging settings once, when it is
first imported, so only a new process shows what the command's settings do.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


def main(work: Path, model: Path) -> None:
    from flows.commands.pipeline_cmds import _prefect_defaults

    _prefect_defaults(work / ".prefect")  # what `trajlake pipeline` and `trajlake serve` do first
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.testing.utilities import prefect_test_harness

    from flows.demo.capture import capture_production_traces
    from flows.demo.config import write_demo_config
    from flows.demo.run import SIZES
    from flows.prefect_flows import run_pipeline

    spec = SIZES["small"]
    lake = work / "lake"
    config = write_demo_config(work / "trajlake.toml", lake, model, spec, None)
    capture_production_traces(lake, spec.questions)

    async def logs(flow_run_id: str) -> list[dict[str, object]]:
        async with get_client() as client:
            found = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            return [{"level": log.level, "name": log.name, "message": log.message} for log in found]

    with prefect_test_harness(server_startup_timeout=180):
        result = run_pipeline(str(config), str(lake), rounds=1)
        APILogHandler().flush()  # the batched records reach the API before they are read
        print(
            json.dumps(
                {"steps": result["run"].training_steps, "logs": asyncio.run(logs(result["run"].flow_run_id))}
            )
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
