"""The scheduled loop, night after night: every pipeline run trains on what is new, from the adapter
in production, in its own folder, and records what the gate decided.

The nights are the demo's pieces at their small size: the tiny model, the calculator agent traced
by OpenTelemetry into the real collector, the `trajlake-pipeline` flow under a real Prefect API.
Between nights a production batch is answered by the adapter then in production (through
`trajlake serve-sampler`'s app), as a deployment would see it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from flows import stages
from flows.demo.base_model import pretrain_base_model
from flows.demo.capture import capture_production_traces
from flows.demo.run import SIZES, write_demo_config
from flows.demo.serving import serve_second_batch
from store.catalog.connection import connect
from store.errors import LegacyRows
from store.migrate import migrate, require_migrated
from store.pipeline_runs import pipeline_runs
from tests.store.test_typed_columns import AT, RUN, old_layout, old_replayed
from training.registry import resolve_adapter
from training.run import read_run_record
from training.tiny import build_tiny_model

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

NAME = "calculator-agent"
SPEC = SIZES["small"]
EVERY_CONVERSATION = "SELECT trajectory_id FROM trajectories WHERE source = 'otel' AND has_content"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nightly-model")
    return pretrain_base_model(build_tiny_model(root / "tiny"), root / "model")


def serve_production_batch(lake: Path, model: Path, seed: int) -> dict[str, Any]:
    """A production batch answered by the adapter holding `production`, as production would."""
    row = resolve_adapter(lake, f"{NAME}:production")
    published = {"name": NAME, "version": row["version"]}
    return serve_second_batch(lake, model, published, SPEC.questions, SPEC.max_new_tokens, seed=seed)


def promoting_lake(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A lake with the production LLM's traffic and the demo's config, where every night's candidate
    goes to production (so each night continues the previous one) and every conversation with
    content gives a scenario (the demo takes only well-rated ones, and a small batch served by a
    weak adapter may have none), so each night's traffic brings train scenarios."""
    monkeypatch.setenv("TRAJLAKE_PIPELINE__REQUIRE_IMPROVEMENT", "false")
    monkeypatch.setenv("TRAJLAKE_SELECT__SCENARIOS", EVERY_CONVERSATION)
    lake = tmp_path / "lake"
    config = write_demo_config(tmp_path / "trajlake.toml", lake, model, SPEC, None)
    capture_production_traces(lake, SPEC.questions)
    return lake, config


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.usefixtures("prefect_api")
def test_three_nights_each_train_from_production_on_what_is_new(
    tmp_path: Path, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.prefect_flows import run_pipeline

    lake, config = promoting_lake(tmp_path, demo_model, monkeypatch)
    monkeypatch.setenv("TRAJLAKE_EVALUATE__INTERMEDIATE", "false")  # each night's ends: the stages below
    results = []
    for night in range(1, 4):
        if night > 1:
            served = serve_production_batch(lake, demo_model, seed=night)
            assert served["model"] == f"{NAME}-v{night - 1}"
        results.append(run_pipeline(str(config), str(lake), rounds=1))

    runs = pipeline_runs(lake)
    assert [r.run_id for r in runs] == [r["run"].run_id for r in results]
    for result in results:  # the flow's result is JSON but for the run's record: no stage result leaks in
        json.dumps({key: value for key, value in result.items() if key != "run"})
    published_keys = {"name", "version", "path", "aliases", "promoted", "decision", "gate", "lineage_json"}
    assert set(results[0]["published"]) == published_keys
    assert len({r.run_id for r in runs}) == len({r.flow_run_id for r in runs}) == 3
    assert all(r.status == "finished" for r in runs)

    # where each night started: the base model with SFT, then the adapter in production, GRPO only
    assert [(r.start_adapter, r.sft) for r in runs] == [
        (None, True),
        (f"{NAME}:v1", False),
        (f"{NAME}:v2", False),
    ]
    # each night trained new steps, in its own runs, written while it ran
    con = connect(lake)
    seen: set[str] = set()
    for run in runs:
        assert run.training_steps > 0 and run.training_runs
        assert not seen & set(run.training_runs)  # no night resumes another's finished runs
        seen |= set(run.training_runs)
        written = con.execute(
            'SELECT min("at"), max("at"), count(*) FROM runs WHERE run_id IN (SELECT unnest($ids))',
            {"ids": run.training_runs},
        ).fetchone()
        assert written[2] > 0
        assert at(run.started_at) <= written[0] and written[1] <= at(run.finished_at)
        assert f"/{run.run_id}/" in run.adapter  # its own folder
        folder = Path(run.adapter).parents[1]  # a finished run keeps its adapters, not its optimizer states
        assert (Path(run.adapter) / "adapter_config.json").exists()
        assert not list(folder.glob("*/checkpoints")), list(folder.glob("*/checkpoints"))

    # what each later night learned from: the scenarios its night's traffic brought (window 0)
    for earlier, later, result in zip(runs, runs[1:], results[1:], strict=False):
        assert later.since == earlier.data_until and later.previous_run == earlier.run_id
        created = con.execute(
            """SELECT min(s.created_at), count(*) FROM trajectories t JOIN scenarios s USING (scenario_id)
               WHERE t.source = 'replay' AND t.policy = ? AND t.replay_run = 'round-1'""",
            [result["rounds"][0]["policy"]],
        ).fetchone()
        assert created[1] > 0 and created[0] >= at(earlier.data_until)

    # lineage: v2 continued v1 and v3 continued v2, and each carries its ancestors' runs
    rows = {v: resolve_adapter(lake, f"{NAME}:{v}") for v in (1, 2, 3)}
    assert rows[1]["parent"].endswith(f"/{runs[0].run_id}/sft-0/adapter")  # night 1's own SFT stage
    assert [rows[v]["parent"] for v in (2, 3)] == [f"{NAME}:1", f"{NAME}:2"]
    manifests = {v: json.loads((Path(rows[v]["path"]) / "manifest.json").read_text()) for v in rows}
    for v in (2, 3):
        assert set(manifests[v - 1]["run_ids"]) < set(manifests[v]["run_ids"])
    # and each says which run made it, from where
    assert [(m["origin"]["pipeline_run"], m["origin"]["started_from"]) for m in manifests.values()] == [
        (runs[0].run_id, "base model"),
        (runs[1].run_id, f"{NAME}:v1"),
        (runs[2].run_id, f"{NAME}:v2"),
    ]
    assert resolve_adapter(lake, f"{NAME}:production")["version"] == 3

    # the gate's decisions are recorded with their numbers, and the report shows them all
    for night, (run, result) in enumerate(zip(runs, results, strict=True), start=1):
        assert run.published == f"{NAME}:v{night}" and run.promoted
        assert run.decision == result["published"]["decision"]
        baseline = "base" if night == 1 else f"{NAME}:v{night - 1}"
        assert run.decision.startswith(f"{NAME}:v{night} promoted")
        assert f"against {baseline} on " in run.decision
    # evaluated: night 1 from the base model, later nights from the adapter they continued, not the base
    assert [[row["stage"] for row in r["evaluation"]["table"] if row["kind"] == "val"] for r in results] == [
        ["base", "sft", "grpo-1"],
        [f"{NAME}:v1", "grpo-1"],
        [f"{NAME}:v2", "grpo-1"],
    ]
    page = Path(results[-1]["report"]).read_text()
    assert "Pipeline runs" in page and all(r.decision in page for r in runs)
    # production feedback per version: the production LLM, then v1 and v2 as they served
    performance = con.execute(
        "SELECT policy, adapter_version, sum(trajectories) FROM policy_performance "
        "WHERE name = 'user_feedback' GROUP BY ALL ORDER BY min(first_seen)"
    ).fetchall()
    assert performance == [
        ("production-llm-1", None, SPEC.questions),
        (f"{NAME}-v1", 1, SPEC.questions),
        (f"{NAME}-v2", 2, SPEC.questions),
    ]
    assert f"{NAME}-v1" in page and f"{NAME}-v2" in page


@pytest.mark.usefixtures("prefect_api")
def test_a_night_without_new_traffic_trains_nothing_and_says_so(
    tmp_path: Path, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.prefect_flows import run_pipeline

    lake = tmp_path / "lake"
    config = write_demo_config(tmp_path / "trajlake.toml", lake, demo_model, SPEC, None)
    capture_production_traces(lake, SPEC.questions)
    first = run_pipeline(str(config), str(lake), rounds=1)
    # no new traffic: a window of 7 days holds the first night's scenarios, learned from already
    monkeypatch.setenv("TRAJLAKE_PIPELINE__WINDOW_DAYS", "7")
    second = run_pipeline(str(config), str(lake), rounds=1)
    assert first["run"].training_steps > 0
    assert set(second) == {"run", "rounds", "adapter", "scenarios", "learned_from", "report", "timings"}
    assert second["learned_from"]["scenarios"] == 0  # nothing new in its window
    json.dumps({key: value for key, value in second.items() if key != "run"})  # nothing trained, still JSON
    run = second["run"]
    assert run.status == "finished" and run.training_steps == 0 and run.published is None
    assert run.decision == f"nothing to learn: no train scenario new since {first['run'].data_until}"
    assert run.since is not None and run.since < run.new_since == first["run"].data_until
    published = 1 if first["run"].published else 0  # the demo publishes night 1 (`latest_if_refused`)
    assert len(connect(lake).execute("SELECT * FROM adapters").fetchall()) == published


@pytest.mark.usefixtures("prefect_api")
def test_each_trigger_of_the_served_deployment_trains_its_own_run(
    tmp_path: Path, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from flows.config.checks import load_config
    from flows.deployments import serve_deployments

    # the flow runs in the runner's subprocess, which reads these from its environment
    monkeypatch.setenv("TRAJLAKE_PIPELINE__WINDOW_DAYS", "-1")  # both triggers learn from everything
    monkeypatch.setenv("TRAJLAKE_PIPELINE__REQUIRE_IMPROVEMENT", "false")
    monkeypatch.setenv("TRAJLAKE_PIPELINE__SFT", "false")  # GRPO on the base model: the shortest run
    lake = tmp_path / "lake"
    config = write_demo_config(tmp_path / "trajlake.toml", lake, demo_model, SPEC, None)
    capture_production_traces(lake, SPEC.questions)
    settings = load_config(config).with_lake(str(lake))
    serve_deployments(settings, str(config), run_once=True)  # registers the deployments

    triggered = []
    for trigger in range(2):
        if trigger:  # a night with nothing new trains nothing, whatever the window: new traffic
            capture_production_traces(lake, SPEC.questions, seed=7)
        flow_run = run_deployment("trajlake-pipeline/nightly-pipeline", timeout=0)
        serve_deployments(settings, str(config), run_once=True)  # the runner runs what is due
        triggered.append(str(flow_run.id))

    async def states() -> list[str]:
        async with get_client() as client:
            return [(await client.read_flow_run(run_id)).state.type.value for run_id in triggered]

    assert asyncio.run(states()) == ["COMPLETED", "COMPLETED"]
    runs = pipeline_runs(lake)
    assert [r.flow_run_id for r in runs] == triggered
    assert all(r.status == "finished" and r.training_steps > 0 for r in runs)
    assert not set(runs[0].training_runs) & set(runs[1].training_runs)
    assert [r.published for r in runs] == [f"{NAME}:v1", f"{NAME}:v2"]
    assert runs[1].start_adapter == f"{NAME}:v1"  # the second trigger continued the first's adapter


def test_a_retried_flow_run_takes_up_its_own_record_and_folder(tmp_path: Path, demo_model: Path) -> None:
    from flows.config.checks import load_config
    from training.run import TrainResult

    lake = tmp_path / "lake"
    capture_production_traces(lake, SPEC.questions)
    config = load_config(write_demo_config(tmp_path / "t.toml", lake, demo_model, SPEC, None)).with_lake(
        str(lake)
    )
    the_lake = stages.lake_of(config.lake)
    sections = {"pipeline": config.pipeline, "publish": config.publish}
    first = stages.begin_pipeline_run(the_lake, "flow-run-1", **sections)
    assert stages.begin_pipeline_run(the_lake, "flow-run-1", **sections) == first  # a retry: as it began
    other = stages.begin_pipeline_run(the_lake, "flow-run-2", **sections)
    assert other.run_id != first.run_id
    assert [r.run_id for r in pipeline_runs(lake)] == [first.run_id, other.run_id]

    stages.make_scenarios(the_lake, select=config.select, scenarios=config.scenarios)

    def sft(pipeline_run: str) -> TrainResult:
        return stages.sft_stage(
            the_lake,
            pipeline_run,
            select=config.select,
            train=config.train,
            sampler=config.sampler,
            pipeline=config.pipeline,
        )

    trained = sft(first.run_id)
    retried = sft(first.run_id)  # resumes its own run, in its own folder
    assert (retried.run_id, retried.adapter_dir) == (trained.run_id, trained.adapter_dir)
    fresh = sft(other.run_id)  # another flow run never resumes it
    assert fresh.run_id != trained.run_id and fresh.adapter_dir != trained.adapter_dir
    assert fresh.global_step > 0


@pytest.mark.usefixtures("prefect_api")
def test_sft_on_production_continues_the_production_adapter_on_the_new_conversations(
    tmp_path: Path, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.prefect_flows import run_pipeline

    lake, config = promoting_lake(tmp_path, demo_model, monkeypatch)
    first = run_pipeline(str(config), str(lake), rounds=1)["run"]
    capture_production_traces(lake, SPEC.questions, seed=7)  # the next day's conversations
    monkeypatch.setenv("TRAJLAKE_PIPELINE__SFT_ON_PRODUCTION", "true")
    monkeypatch.setenv("TRAJLAKE_PIPELINE__KEEP_CHECKPOINTS", "true")
    second = run_pipeline(str(config), str(lake), rounds=1)["run"]
    kept = Path(second.adapter).parents[1]
    assert list(kept.glob("sft-0/checkpoints/checkpoint-*")) and list(
        kept.glob("grpo-1/checkpoints/checkpoint-*")
    )
    assert not list(Path(first.adapter).parents[1].glob("*/checkpoints"))  # the first night kept none

    assert (second.start_adapter, second.sft) == (f"{NAME}:v1", True)
    sft = read_run_record(Path(second.adapter).parents[1] / "sft-0" / "adapter")
    assert sft is not None and sft["parent"]["run_id"] == resolve_adapter(lake, f"{NAME}:1")["run_id"]
    # it imitated only the conversations that came in since the first night
    assert (
        f"started_at >= TIMESTAMPTZ '{datetime.fromisoformat(first.data_until).isoformat()}'"
        in sft["lineage"]["sql"]
    )
    assert second.training_runs[0] == sft["run_id"] and len(second.training_runs) == 2


@pytest.mark.usefixtures("prefect_api")
def test_a_lake_an_older_trajlake_wrote_fails_the_run_in_one_line_naming_migrate(
    tmp_path: Path, demo_model: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run builds on the previous runs' records and the replayed groups' sampling: on a lake an
    older trajlake wrote (those in JSON text only) the CLI says so in one line, exit 2, and the
    flow (as a deployment runs it) records the run failed with that reason, no traceback; nothing
    is migrated behind the user's back, and a retry after `trajlake migrate` begins afresh."""
    import dataclasses
    import os
    import subprocess
    import sys

    from flows.config.checks import load_config
    from flows.prefect_flows import pipeline_flow

    lake = tmp_path / "lake"
    old_layout(lake, "trajectories", [old_replayed("t-1", 0.8)])
    old_layout(
        lake,
        "runs",
        [
            {
                "run_id": RUN.run_id,
                "step": 0,
                "stage": "pipeline",
                "at": AT,
                "metrics": json.dumps(dataclasses.asdict(RUN)),
            }
        ],
    )
    config = write_demo_config(tmp_path / "trajlake.toml", lake, demo_model, SPEC, None)

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLAKE_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    cli = subprocess.run(
        [sys.executable, "-m", "flows.cli", "pipeline", "--config", str(config), "--lake", str(lake)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in cli.stdout + cli.stderr and cli.returncode == 2, cli.stderr[-2000:]
    (line,) = cli.stderr.strip().splitlines()
    assert line.startswith("error: ") and "trajlake migrate" in line
    assert pipeline_runs(lake, skip_unmigrated=True) == []  # refused before anything ran

    capfd.readouterr()
    state = pipeline_flow(config_file=str(config), lake=str(lake), return_state=True)
    printed = capfd.readouterr()
    assert state.is_failed() and "trajlake migrate" in (state.message or "")
    assert "Traceback" not in printed.out + printed.err, printed.err[-2000:]
    (refused,) = pipeline_runs(lake, skip_unmigrated=True)
    assert refused.status == "failed" and refused.error is not None
    assert refused.error.startswith("start: LegacyRows: ") and "trajlake migrate" in refused.error
    with pytest.raises(LegacyRows):  # the older rows are as they were
        require_migrated(lake)

    migrate(lake)
    settings = load_config(config).with_lake(str(lake))
    retried = stages.begin_pipeline_run(
        stages.lake_of(settings.lake),
        refused.flow_run_id,
        pipeline=settings.pipeline,
        publish=settings.publish,
    )
    assert retried.run_id == refused.run_id and retried.status == "running" and retried.error is None
    assert (
        retried.table_versions and retried.previous_run == RUN.run_id
    )  # the migrated run: its last finished
