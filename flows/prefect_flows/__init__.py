"""Prefect flows: thin wiring of the stage functions in `flows.stages` into scheduled runs.

`ingesting.py` and `pipeline.py` hold the two flows `trajlake serve` deploys, `tasks.py` the
tasks they call and the task runner. No module here is named like a top-level package
(`ingest`, `prefect`): Prefect runs a deployment's entrypoint as a script, with its folder
first on `sys.path`, where such a module would shadow the package.

Each flow loads the configuration (a `trajlake.toml` path plus environment overrides:
deployments pass only JSON-able parameters), opens its lake once (`stages.lake_of`), calls
stage functions as tasks with that lake and the sections of the settings each reads, and
publishes artifacts. No transformation logic lives here.

Retries and caching: `tasks.py`.

Logs: each step is logged at INFO with `get_run_logger()` (the run's log in the Prefect UI) and
to trajlake's console logger (`flows.progress`); no flow sets `log_prints`, which would send
every library's `print` inside a task to the run's log (`flows.progress` says which did).
"""

from flows.prefect_flows.ingesting import ingest_flow
from flows.prefect_flows.pipeline import pipeline_flow, run_pipeline
from flows.prefect_flows.tasks import flow_settings, task_runner

__all__ = ["flow_settings", "ingest_flow", "pipeline_flow", "run_pipeline", "task_runner"]
