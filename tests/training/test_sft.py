"""SFT stage: assistant-only masks, packing, runs metrics, checkpoints, resume after a kill, early errors."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from store.catalog.connection import connect
from store.errors import SelectionError
from store.lake import Lake
from store.writer import write
from tests.store.helpers import run_metrics
from tests.training.test_datasets import add_call
from tests.training.train_helpers import msg, traj
from training.datasets import select_sft
from training.errors import BadHyperparameter, TrainingError
from training.run import last_checkpoint, load_tokenizer
from training.sft import tokenize_conversations, train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ALL = "SELECT trajectory_id FROM trajectories"
REPO = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, **kw: object) -> TrajlakeSFTConfig:
    defaults: dict = dict(
        output_dir=str(tmp_path / "ckpt"),
        per_device_train_batch_size=2,
        max_steps=3,
        learning_rate=5e-3,
        max_length=512,
        activation_checkpointing=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    defaults.update(kw)
    return TrajlakeSFTConfig(**defaults)


def conversations(n: int) -> list[dict]:
    return [
        traj(
            f"c{i:03d}",
            messages=[msg("user", f"What is {i} + 2?"), msg("assistant", f"The answer is {i + 2}.")],
        )
        for i in range(n)
    ]


def test_assistant_only_masks(lake: Lake, tiny_model: Path) -> None:
    write(lake, "trajectories", [add_call("t1")])
    tokenizer = load_tokenizer(str(tiny_model))
    out = tokenize_conversations(select_sft(lake, ALL).rows, tokenizer)
    ids, mask = out["input_ids"][0], out["assistant_masks"][0]
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    ignored = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert '"name": "add"' in trained and "It is 5." in trained  # the tool call and the answer are learned
    assert (
        "What is 2 + 3?" in ignored and "<tool_response>\n5\n</tool_response>" in ignored
    )  # user + tool are not
    assert '"name": "add"' in ignored  # the tool schema in the system prompt is context, not a target


def test_padded_batches_by_default(tmp_path: Path) -> None:
    # bfd packing lost to padded batches on a CPU and on an H200 with SDPA (training.device)
    assert config(tmp_path).packing is False
    assert config(tmp_path, use_cpu=True).packing is False
    assert config(tmp_path, packing=True).packing is True


def test_train_sft_end_to_end(lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    write(lake, "trajectories", [add_call("t1"), *conversations(11)])
    given = config(tmp_path, packing=True)
    before = copy.deepcopy(given)
    result = train_sft(lake, ALL, tiny_model, tmp_path / "run", given)
    assert result.stage == "sft" and result.global_step == 3
    assert given == before and given.output_dir == str(tmp_path / "ckpt")  # the run's folder went on a copy
    assert result.report["conversations"] == 12 and result.report["packed_rows"] < 12  # packing merged rows
    assert result.report["padding_free"] and 0 < result.report["packing_bin_fill"] <= 1
    adapter = Path(result.adapter_dir)
    config_json = json.loads((adapter / "adapter_config.json").read_text())
    assert config_json["r"] == 16 and config_json["bias"] == "none" and not config_json.get("modules_to_save")
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    assert all(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)  # every LoRA B moved from zero
    rows = run_metrics(lake, result.run_id)
    assert [r[0] for r in rows] == [1, 2, 3]
    assert {"loss", "grad_norm", "tokens_per_second"} <= set(rows[0][2])
    record = json.loads((adapter / "trajlake_run.json").read_text())
    assert record["stages"] == ["sft"] and record["lineage"]["trajectory_count"] == 12


def test_errors_before_any_work(lake: Lake, tmp_path: Path) -> None:
    write(lake, "trajectories", conversations(2))
    with pytest.raises(SelectionError) as err:
        train_sft(lake, ALL + " WHERE false", tmp_path / "no-model", tmp_path / "run", config(tmp_path))
    assert err.value.reason == "empty_selection"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"lora_r": 24}, "lora_r"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"lora_dropout": 1.5}, "lora_dropout"),
    ],
)
def test_bad_hyperparameters(tmp_path: Path, kw: dict, name: str) -> None:
    with pytest.raises(BadHyperparameter) as err:
        config(tmp_path, **kw)
    assert err.value.field == name


KILLED_RUN = textwrap.dedent(
    """
    import sys
    from training.sft import train_sft
    from training.sft_config import TrajlakeSFTConfig
    lake, model, out = sys.argv[1:4]
    cfg = TrajlakeSFTConfig(output_dir="x", per_device_train_batch_size=2, max_steps=400, learning_rate=1e-3,
                            max_length=512, activation_checkpointing=False, save_strategy="steps", save_steps=4,
                            seed=0, disable_tqdm=True)
    train_sft(lake, "SELECT trajectory_id FROM trajectories", model, out, cfg)
    """
)


def test_resume_after_kill_finishes(lake: Lake, tiny_model: Path, tmp_path: Path) -> None:
    write(lake, "trajectories", conversations(16))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, lake.root, str(tiny_model), str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while last_checkpoint(out) is None and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)  # a hard kill: no cleanup, no final save
        proc.wait()
    killed_at = last_checkpoint(out)
    assert killed_at is not None, "the killed run never reached its first checkpoint"
    assert not (out / "adapter").exists()
    step_killed = int(killed_at.rsplit("-", 1)[1])
    assert step_killed < 400
    run_id = json.loads((out / "run.json").read_text())["run_id"]

    # A fresh start in the same folder is refused (it would mix two runs' checkpoints) ...
    with pytest.raises(TrainingError, match="--resume"):
        train_sft(lake, ALL, tiny_model, out, config(tmp_path, max_steps=step_killed + 4))
    # ... resuming continues the same run to the end.
    cfg = config(tmp_path, max_steps=step_killed + 4, save_strategy="steps", save_steps=4)
    result = train_sft(lake, ALL, tiny_model, out, cfg, resume=True)
    assert result.run_id == run_id
    assert result.report["resumed_from"] == killed_at
    assert result.global_step == step_killed + 4
    steps = [
        r[0]
        for r in connect(lake)
        .sql(f"SELECT step FROM runs WHERE run_id = '{run_id}' ORDER BY step")
        .fetchall()
    ]
    assert steps[-1] == step_killed + 4 and len(steps) == len(set(steps))
