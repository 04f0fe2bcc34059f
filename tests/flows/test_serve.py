"""`trajlake serve`: deployments whose schedules match the configuration, read back through Prefect's API."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.config.checks import load_config
from flows.deployments import deployment_specs


def test_specs_follow_the_configuration(tmp_path: Path) -> None:
    path = tmp_path / "trajlake.toml"
    path.write_text(
        '[schedules]\ningest = "*/15 * * * *"\npipeline = "30 2 * * 1"\ntimezone = "Europe/Paris"\n'
    )
    specs = deployment_specs(load_config(path), str(path))
    assert [(s.flow_name, s.cron, s.timezone) for s in specs] == [
        ("trajlake-ingest", "*/15 * * * *", "Europe/Paris"),
        ("trajlake-pipeline", "30 2 * * 1", "Europe/Paris"),
    ]
    assert all(s.parameters["config_file"] == str(path.absolute()) for s in specs)
    # triggered runs take SQL from whoever triggers them: lake tables only, passed as a flow argument
    assert all(s.parameters["sql_lake_only"] is True for s in specs)


def test_a_served_run_reads_only_lake_tables_whatever_the_config_says(tmp_path: Path) -> None:
    from flows.prefect_flows import flow_settings

    path = tmp_path / "trajlake.toml"
    path.write_text("[lake]\nsql_lake_only = false\n")
    assert flow_settings(str(path), str(tmp_path / "lake")).lake.sql_lake_only is False
    served = flow_settings(str(path), str(tmp_path / "lake"), sql_lake_only=True)
    assert served.lake.sql_lake_only is True and served.lake.path == str(tmp_path / "lake")


@pytest.mark.slow  # starts a real Prefect server (~10 s): outside the inner loop
@pytest.mark.usefixtures("prefect_api")
def test_serve_registers_scheduled_deployments(tmp_path: Path) -> None:
    path = tmp_path / "trajlake.toml"
    # the nightly pipeline trains on the base model, so serving needs one named (the tiny model's path would do)
    path.write_text('[sampler]\nmodel = "base"\n[schedules]\ningest = "5 * * * *"\npipeline = "0 4 * * *"\n')
    result = CliRunner().invoke(
        app, ["serve", "--config", str(path), "--lake", str(tmp_path / "lake"), "--once"]
    )
    assert result.exit_code == 0, result.output
    assert "trajlake-ingest/hourly-ingest" in result.output
    assert "TRAJLAKE_LAKE__SQL_LAKE_ONLY" not in os.environ  # the setting travels as a flow parameter

    from prefect.client.orchestration import get_client

    async def schedules() -> dict[str, list[str]]:
        async with get_client() as client:
            out = {}
            for name in ("trajlake-ingest/hourly-ingest", "trajlake-pipeline/nightly-pipeline"):
                deployment = await client.read_deployment_by_name(name)
                out[name] = [s.schedule.cron for s in deployment.schedules]
                assert deployment.parameters["lake"] == str(tmp_path / "lake")
                assert deployment.parameters["sql_lake_only"] is True
            return out

    assert asyncio.run(schedules()) == {
        "trajlake-ingest/hourly-ingest": ["5 * * * *"],
        "trajlake-pipeline/nightly-pipeline": ["0 4 * * *"],
    }
