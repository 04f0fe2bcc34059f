"""Runs that say what happened: a failed pipeline run is recorded `failed` with its step and error, and
every gate decision, the pipeline's or `trajlake publish`'s, is in `runs` and in the report.

The lake is the demo's at its small size: the calculator agent's production traffic, its
tiny pretrained model, its configuration.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows import stages
from flows.cli import app
from flows.commands.pipeline_cmds import PREFECT_LOGGING
from flows.config.checks import load_config
from flows.demo.base_model import pretrain_base_model
from flows.demo.capture import capture_production_traces
from flows.demo.config import write_demo_config
from flows.demo.run import SIZES
from flows.report import render_report, report_data
from store.pipeline_runs import gate_decisions, pipeline_runs
from tests.flows.stages.by_hand import sft_by_hand
from training.registry import adapter_rows
from training.tiny import build_tiny_model

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

NAME = "calculator-agent"
SPEC = SIZES["small"]


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("records-model")
    return pretrain_base_model(build_tiny_model(root / "tiny"), root / "model")


@pytest.fixture
def demo_lake(tmp_path: Path, demo_model: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The demo's lake with its production traffic, and its trajlake.toml (in effect for commands)."""
    for key, value in PREFECT_LOGGING.items():  # what the commands set stays this test's
        monkeypatch.setenv(key, value)
    lake = tmp_path / "lake"
    config = write_demo_config(tmp_path / "trajlake.toml", lake, demo_model, SPEC, None)
    monkeypatch.setenv("TRAJLAKE_CONFIG", str(config))
    capture_production_traces(lake, SPEC.questions)
    return lake, config


@pytest.mark.usefixtures("prefect_api")
def test_a_failed_run_says_failed_where_and_why(
    demo_lake: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    lake, config = demo_lake
    monkeypatch.setenv("TRAJLAKE_SELECT__SCENARIOS", "SELECT trajectory_id FROM trajectories WHERE false")
    out = CliRunner().invoke(app, ["pipeline", "--config", str(config), "--lake", str(lake)])
    assert out.exit_code == 1, out.output
    (run,) = pipeline_runs(lake)
    assert run.status == "failed" and run.finished_at
    assert run.error is not None
    assert run.error.startswith("scenarios: ScenarioError: the selection returned no trajectories"), run.error
    # the command's last word is where and why (Prefect's log of the failed task, traceback and all,
    # is above it on the console and in the flow run's log)
    assert out.output.strip().splitlines()[-1] == f"error: pipeline run {run.run_id} failed at {run.error}"
    # the report says so, and the next run learns from what the failed one did not finish
    page = render_report(report_data(lake, "calculator"))
    assert f"failed at {html.escape(run.error)}" in page
    settings = load_config(config).with_lake(str(lake))
    begun = stages.begin_pipeline_run(
        stages.lake_of(settings.lake), "flow-run-2", pipeline=settings.pipeline, publish=settings.publish
    )
    assert begun.previous_run is None


def test_every_gate_decision_of_trajlake_publish_is_recorded_and_reported(
    demo_lake: tuple[Path, Path],
) -> None:
    lake, config = demo_lake
    adapter = sft_by_hand(lake, config)
    runner = CliRunner()
    gate = ["--eval-reward", "exact_match", "--lake", str(lake), "--name", NAME]

    forced = runner.invoke(app, ["publish", adapter, "--production", "--force", *gate])
    assert forced.exit_code == 0, forced.output
    # the same weights against themselves in production: a difference of exactly 0, refused
    refused = runner.invoke(app, ["publish", adapter, "--production", *gate])
    assert refused.exit_code == 1 and "nothing was published" in refused.output, refused.output
    assert [r["version"] for r in adapter_rows(lake, NAME)] == [1]  # no refused version piles up

    first, second = gate_decisions(lake)
    assert (first.published, first.promoted, first.candidate) == (f"{NAME}:v1", True, adapter)
    assert first.decision.startswith(f"{NAME}:v1 promoted")
    assert (second.published, second.promoted) == (None, False)
    assert second.decision.startswith(
        f"{NAME} candidate not promoted: +0.000 [+0.000, +0.000] against {NAME}:v1"
    )
    assert second.decision.endswith("; nothing published") and second.eval_run_id
    assert pipeline_runs(lake) == []  # a gate decision is not a night: the next run's "new" is unmoved

    # a version published without `production`: the report's lineage stays on production's version
    assert runner.invoke(app, ["publish", adapter, "--lake", str(lake), "--name", NAME]).exit_code == 0
    data = report_data(lake, "exact_match", adapter_name=NAME)
    assert data.adapter is not None and data.adapter["version"] == 1
    page = render_report(data)
    assert "Pipeline runs" in page
    assert html.escape(first.decision) in page and html.escape(second.decision) in page
