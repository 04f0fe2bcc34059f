"""The pipeline on a real Dask cluster (`pipeline.task_runner = "dask"`): two worker processes,
replay and scoring split by scenario shard, one worker killed mid-replay; the lake afterwards
holds the same groups, rewards and adapter as the default thread runner's run on the same seed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.training.helpers import make_trajectory

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

distributed = pytest.importorskip("distributed", reason="Dask is the [dask] extra (prefect-dask)")
pytest.importorskip("prefect_dask", reason="Dask is the [dask] extra (prefect-dask)")


def production(lake: Lake) -> None:
    rows = []
    for i in range(16):
        a, b = 3 + i, 4 + 2 * i
        row = make_trajectory(f"p{i:02d}")
        row["messages"][1]["content"] = f"What is {a} + {b}?"
        rows.append(row)
    write(lake, "trajectories", rows)


def config_file(tmp_path: Path, lake: Lake, model: Path, runner: str, address: str = "") -> str:
    path = tmp_path / f"{runner}.toml"
    path.write_text(
        f"""
[lake]
path = "{lake.root}"
[select]
scenarios = "SELECT trajectory_id FROM trajectories WHERE source = 'otel'"
replay = "SELECT scenario_id FROM scenarios WHERE split = 'train'"
[scenarios]
val_fraction = 0.25
[sampler]
model = "{model}"
[replay]
group_size = 4
[replay.sampling]
temperature = 1.0
max_tokens = 24
seed = 0
[replay.limits]
max_turns = 1
[score]
rewards = ["tool_success", "valid_json"]
reward = "valid_json"
[evaluate]
reward = "valid_json"
group_size = 2
[pipeline]
rounds = 1
sft = false
latest_if_refused = true  # published whatever the gate says: the report below shows its lineage
replay_shards = 2
task_runner = "{runner}"
max_workers = 2
dask_address = "{address}"
[train.grpo]
per_device_train_batch_size = 4
num_train_epochs = 1
learning_rate = 1e-3
seed = 0
activation_checkpointing = false
skip_equal_reward_groups = false
[publish]
name = "dask-agent"
"""
    )
    return str(path)


def lake_contents(lake: Lake) -> dict[str, object]:
    con = connect(lake)
    groups = con.execute(
        """SELECT group_id, count(*) AS n, list(turns[1].completion_token_ids ORDER BY trajectory_id)
           FROM trajectories WHERE source = 'replay' AND replay_run = 'round-1'
           GROUP BY group_id ORDER BY group_id"""
    ).fetchall()
    rewards = con.execute(
        """SELECT r.trajectory_id, r.name, r.value FROM latest_rewards r JOIN trajectories t USING (trajectory_id)
           WHERE t.source = 'replay' AND t.replay_run = 'round-1' ORDER BY ALL"""
    ).fetchall()
    return {"groups": groups, "rewards": rewards}


@pytest.mark.usefixtures("prefect_api")
def test_dask_workers_write_what_threads_write(tmp_path: Path, tiny_model: Path) -> None:
    from flows.prefect_flows import run_pipeline

    threads_lake, dask_lake = Lake(str(tmp_path / "threads")), Lake(str(tmp_path / "dask"))
    for lake in (threads_lake, dask_lake):
        production(lake)
    expected_result = run_pipeline(
        config_file(tmp_path, threads_lake, tiny_model, "threads"), threads_lake.root
    )

    # workers are processes: they reach the test's Prefect API through the environment
    from prefect.settings import PREFECT_API_URL

    os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with distributed.Client(cluster) as client:
        worker_pids = sorted(client.run(os.getpid).values())
    assert len(worker_pids) == 2
    killed: list[int] = []

    def kill_a_worker_mid_replay() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            try:
                replayed = (
                    connect(dask_lake)
                    .execute("SELECT count(*) FROM trajectories WHERE source = 'replay'")
                    .fetchone()[0]
                )
            except Exception:  # the table is being created or committed this instant
                replayed = 0
            if replayed:  # some groups are in, others are being sampled: one worker dies now
                os.kill(worker_pids[0], signal.SIGKILL)
                killed.append(worker_pids[0])
            time.sleep(0.05)

    try:
        killer = threading.Thread(target=kill_a_worker_mid_replay, daemon=True)
        killer.start()
        result = run_pipeline(
            config_file(tmp_path, dask_lake, tiny_model, "dask", cluster.scheduler_address), dask_lake.root
        )
        killer.join(timeout=5)
    finally:
        cluster.close()
        os.environ.pop("PREFECT_API_URL", None)
    assert killed, "no worker was killed mid-replay"

    got, expected = lake_contents(dask_lake), lake_contents(threads_lake)
    assert got["groups"] and all(n == 4 for _, n, _ in got["groups"])  # whole groups only
    assert got == expected  # the same groups, tokens and rewards
    assert result["rounds"][0]["groups"] == expected_result["rounds"][0]["groups"]
    adapters = [
        load_file(str(Path(r["adapter"]) / "adapter_model.safetensors")) for r in (result, expected_result)
    ]
    for name, weight in adapters[0].items():
        torch.testing.assert_close(weight, adapters[1][name], rtol=0, atol=1e-6, msg=name)
    assert connect(dask_lake).execute("SELECT count(*) FROM adapters").fetchone()[0] == 1

    # `trajlake report` on a lake the pipeline wrote with no demo code involved
    from typer.testing import CliRunner

    out = tmp_path / "report.html"
    shown = CliRunner().invoke(app, ["report", "--lake", threads_lake.root, "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    page = out.read_text()
    assert "Adapter lineage" in page and "dask-agent" in page and "class='group'" in page
    assert (Path(threads_lake.root) / "_work" / "report.html").exists()  # the pipeline's own, after its run


def test_the_flow_pickles_by_value() -> None:
    """Under the Dask runner Prefect ships the flow's function to the cluster by value (the module
    attribute is the `Flow`, not the function), with the modules and classes its code names: a
    name of `store` there broke every Dask run while `store` was a lazy_loader module, which
    cloudpickle cannot pickle. The flow names `store.errors.LegacyRows` itself."""
    import cloudpickle

    from flows.prefect_flows import pipeline_flow

    assert "LegacyRows" in pipeline_flow.fn.__code__.co_names  # a name of store's is shipped
    assert cloudpickle.loads(cloudpickle.dumps(pipeline_flow.fn)).__name__ == "pipeline_flow"
