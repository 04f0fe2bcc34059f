"""Flows: the `trajlake` command line (`flows.cli`, `flows.commands`), the Prefect flows and
deployments (`flows.prefect_flows`, `flows.deployments`), the stage functions they run
(`flows.stages`), the configuration, one typed object whose sections the libraries declare (`flows.config`), the demo (`flows.demo`) and its report (`flows.report`).

Flows wire `ingest`, `judging` and `training` together and hold no data logic.
"""
