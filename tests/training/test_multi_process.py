"""`trajlake train sft|grpo` on two CPU processes (gloo): `torchrun --nproc-per-node 2` and
`accelerate launch --num_processes 2`, against one process with the same global batch.

Both ranks select the same rows from the same table versions, one run id is used, only
rank 0 writes the adapter, the run record and the `runs` rows (no duplicates), and the
trained LoRA weights equal the single-process run's: SFT within 1e-5; GRPO within a fifth
of the learning rate (Adam turns float-order noise in near-zero gradients into steps of up
to the learning rate; 99.9% of the weights agree within 1e-5).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.store.helpers import run_metrics
from tests.training.train_helpers import msg, stored_groups, traj

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

LR = 1e-3


def trajlake(
    *args: str, launcher: list[str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLAKE_")}  # no settings but these
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    command = [*(launcher or [sys.executable, "-m", "flows.cli"]), *args]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=Path(args[args.index("--lake") + 1]).parent,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


TORCHRUN = [shutil.which("torchrun") or "torchrun", "--nproc-per-node", "2", "--no-python", "trajlake"]
# accelerate's `--cpu` launches one process (several CPUs only through MPI); its `--multi_gpu`
# launcher is torch.distributed.run, and on a machine without GPUs trajlake's configs claim the CPU.
ACCELERATE = [
    shutil.which("accelerate") or "accelerate",
    "launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "-m",
    "flows.cli",
]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "adapter" / "adapter_model.safetensors"))


def runs_rows(lake: Lake, run: Path) -> list[tuple[str, int]]:
    run_id = json.loads((run / "adapter" / "trajlake_run.json").read_text())["run_id"]
    return (
        connect(lake)
        .execute("SELECT run_id, step FROM runs WHERE run_id = ? ORDER BY step", [run_id])
        .fetchall()
    )


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("multi") / "lake"))
    rows, rewards = stored_groups(str(tiny_model), groups=4, size=4)
    conversations = [
        traj(f"c{i:03d}", messages=[msg("user", f"What is {i} + 2?"), msg("assistant", f"It is {i + 2}.")])
        for i in range(16)
    ]
    write(lake, "trajectories", rows + conversations)
    write(lake, "rewards", rewards)
    return lake


def test_sft_on_two_processes_equals_one(lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    common = ["train", "sft", "--base-model", str(tiny_model), "--lake", lake.root, "--max-steps", "3"]
    common += [
        "--sql",
        "SELECT trajectory_id FROM trajectories WHERE trajectory_id LIKE 'c%'",
        "--lr",
        str(LR),
    ]
    trajlake(*common, "--output", str(tmp_path / "one"), "--batch-size", "4")
    launched = trajlake(*common, "--output", str(tmp_path / "two"), "--batch-size", "2", launcher=TORCHRUN)
    run_lines = [line for line in launched.stdout.splitlines() if line.startswith("sft: run")]
    assert len(run_lines) == 1  # one run, reported once (by rank 0)
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
    assert [step for _, step in runs_rows(lake, tmp_path / "two")] == [1, 2, 3]  # rank 0's rows only


def test_grpo_on_two_processes_equals_one(lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    common = ["train", "grpo", "--base-model", str(tiny_model), "--lake", lake.root, "--max-steps", "2"]
    common += ["--sql", "SELECT trajectory_id FROM trajectories WHERE group_id IS NOT NULL", "--lr", str(LR)]
    common += ["--no-activation-checkpointing"]
    trajlake(*common, "--output", str(tmp_path / "one"), "--batch-size", "8")
    # each rank gets whole groups (4 rows = one group per rank per step): tree packing shares their prompt
    trajlake(*common, "--output", str(tmp_path / "two"), "--batch-size", "4", launcher=ACCELERATE)
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    close = 0
    for name in one:
        difference = (two[name] - one[name]).abs()
        assert difference.max() <= LR / 5, name
        close += int((difference <= 1e-5).sum())
    assert close >= 0.999 * sum(w.numel() for w in one.values())
    rows = runs_rows(lake, tmp_path / "two")
    assert [step for _, step in rows] == [1, 2]
    metrics = run_metrics(lake, rows[0][0])[0][2]  # step 1
    assert metrics["tree_packing/saved_token_share"] > 0.3  # whole groups on each rank
    record = json.loads((tmp_path / "two" / "adapter" / "trajlake_run.json").read_text())
    single = json.loads((tmp_path / "one" / "adapter" / "trajlake_run.json").read_text())
    assert record["lineage"]["table_versions"] == single["lineage"]["table_versions"]  # one snapshot
