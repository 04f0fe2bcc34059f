"""Every Prefect flow trajlake defines is one `trajlake serve` deploys: no flow that looks finished
and is never deployed, called or tested."""

from __future__ import annotations

import importlib
import pkgutil

from prefect import Flow

import flows.prefect_flows
from flows.config.checks import load_config
from flows.deployments import deployment_specs


def test_every_defined_flow_is_deployed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Every module of the package, walked: a flow added in a new module is held to this too.
    package = flows.prefect_flows
    modules = [package] + [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]
    assert len(modules) > 3, "the walk found the package's modules"
    defined = {value.name for module in modules for value in vars(module).values() if isinstance(value, Flow)}
    config = load_config()
    deployed = {spec.flow_name for spec in deployment_specs(config, None)}
    assert defined == deployed == {"trajlake-ingest", "trajlake-pipeline"}
