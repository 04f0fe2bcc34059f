"""Every Prefect flow trajlake defines is one `trajlake serve` deploys: no flow that looks finished
and is never deployed, called or tested."""

from __future__ import annotations

from prefect import Flow

import flows.prefect_flows.ingesting
import flows.prefect_flows.pipeline
import flows.prefect_flows.tasks
from flows.config.checks import load_config
from flows.deployments import deployment_specs


def test_every_defined_flow_is_deployed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    modules = (flows.prefect_flows.ingesting, flows.prefect_flows.pipeline, flows.prefect_flows.tasks)
    defined = {value.name for module in modules for value in vars(module).values() if isinstance(value, Flow)}
    config = load_config()
    deployed = {spec.flow_name for spec in deployment_specs(config, None)}
    assert defined == deployed == {"trajlake-ingest", "trajlake-pipeline"}
