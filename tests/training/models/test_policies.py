"""Policy names: what sampled a trajectory is named by what it is, never by where its files live.

A copied or moved adapter (or base model folder) keeps its policy name, so its group ids,
its resumed replays and GRPO's staleness bound do not change with the folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from store.catalog.connection import connect
from store.lake import Lake
from tests.training.helpers import TOOLS, ScriptedSampler, calculator_script
from training.grpo_rows import policy_lineage
from training.models.policies import adapter_label, model_name, policy_name
from training.replay.scenario_io import load_scenarios
from training.replay.stage import ReplayConfig, replay
from training.run import TrainResult, parent_record, read_run_record, write_run_record

RUN_ID = "grpo-20261126T101500-1a2b3c4d"


def adapter_folder(
    path: Path, *, weights: bytes = b"lora-a", run_id: str | None = RUN_ID, parent: dict | None = None
) -> Path:
    """A PEFT-shaped adapter folder; with `run_id`, the run record trajlake writes beside it."""
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    (path / "adapter_model.safetensors").write_bytes(weights)
    if run_id:
        stage = run_id.partition("-")[0]
        write_run_record(TrainResult(stage, run_id, str(path), "base", global_step=1, parent=parent))
    return path


def test_base_models_are_named_by_hub_id_or_folder_name() -> None:
    assert model_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id stays
    assert model_name("calculator-agent-v1") == "calculator-agent-v1"  # a served name stays
    assert model_name("/tmp/work/tiny-qwen/") == "tiny-qwen" and model_name("./tiny-qwen") == "tiny-qwen"
    cache = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/0a1b2c"
    assert model_name(cache) == "Qwen/Qwen2.5-0.5B"  # a hub download by its repo id, not its revision
    assert policy_name("/a/tiny-qwen") == policy_name("/b/c/tiny-qwen") == "tiny-qwen"


def test_a_trained_adapter_is_named_by_its_run_wherever_it_lies(tmp_path: Path) -> None:
    first = adapter_folder(tmp_path / "lake" / "_work" / "grpo-3" / "adapter")
    copy = shutil.copytree(first, tmp_path / "registry" / "agent" / "v1")  # as `publish` copies it
    assert policy_name("/w/model", str(first)) == f"model+{RUN_ID}"
    assert policy_name("/elsewhere/model", str(copy)) == f"model+{RUN_ID}"
    assert str(tmp_path) not in policy_name("/w/model", str(first))


def test_an_adapter_without_a_run_record_is_named_by_its_files(tmp_path: Path) -> None:
    external = adapter_folder(tmp_path / "a" / "my-lora", run_id=None)
    name = adapter_label(str(external))
    assert name.startswith("my-lora@") and len(name) == len("my-lora@") + 8
    same = shutil.copytree(external, tmp_path / "b" / "my-lora")
    assert adapter_label(str(same)) == name  # a copy: the same files, the same name
    other = adapter_folder(tmp_path / "c" / "my-lora", weights=b"lora-b", run_id=None)
    assert adapter_label(str(other)) != name  # other weights under the same folder name
    # nothing to read here (a URL, a path only a remote server sees): the path as given decides
    assert adapter_label("/server/only/my-lora") == adapter_label("/server/only/my-lora")
    assert adapter_label("/server/only/my-lora") != adapter_label("/server/other/my-lora")
    assert adapter_label("s3://bucket/loras/my-lora").startswith("my-lora@")


def _scenarios(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "scenarios.jsonl"
    lines = [
        {
            "messages": [{"role": "user", "content": f"What is {i} + 1?"}],
            "tools": TOOLS,
            "expected": {"answer": i + 1},
        }
        for i in range(3)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    load_scenarios(lake, path)


def _sampler(model: Path, adapter: Path) -> ScriptedSampler:
    sampler = ScriptedSampler(str(model), calculator_script)
    sampler.adapter = str(adapter)  # the scripted backend ignores it; the policy name reads it
    return sampler


def test_a_copied_adapter_keeps_its_policy_and_group_ids(
    lake: Lake, tmp_path: Path, tiny_model: Path
) -> None:
    _scenarios(lake, tmp_path)
    adapter = adapter_folder(tmp_path / "work" / "grpo-1" / "adapter")
    config = ReplayConfig(group_size=2, run="eval")
    first = _sampler(tiny_model, adapter)
    sampled = replay(lake, "SELECT scenario_id FROM scenarios", first, config, progress=False)
    assert len(sampled.group_ids) == 3 and first.policy == f"{tiny_model.name}+{RUN_ID}"

    # the base model and the adapter copied elsewhere: the same policy, so the same groups
    model_copy = shutil.copytree(tiny_model, tmp_path / "copied" / tiny_model.name)
    adapter_copy = shutil.copytree(adapter, tmp_path / "copied" / "agent-v1")
    again = _sampler(model_copy, adapter_copy)
    resumed = replay(lake, "SELECT scenario_id FROM scenarios", again, config, progress=False)
    assert again.policy == first.policy
    assert resumed.group_ids == [] and sorted(resumed.skipped_group_ids) == sorted(sampled.group_ids)

    rows = connect(lake).sql("SELECT policy, model, metadata FROM trajectories").fetchall()
    assert {policy for policy, _, _ in rows} == {first.policy}
    # the paths stay with every row as attributes
    assert {(model, json.loads(meta)["adapter"]) for _, model, meta in rows} == {
        (str(tiny_model), str(adapter))
    }


def test_staleness_names_ancestors_from_their_records_after_they_move(tmp_path: Path) -> None:
    base = "/models/tiny-qwen"
    sft = adapter_folder(tmp_path / "sft" / "adapter", run_id="sft-20261126T100000-00000001")
    grpo = adapter_folder(
        tmp_path / "grpo-1" / "adapter", weights=b"lora-b", run_id=RUN_ID, parent=read_run_record(sft)
    )
    shutil.rmtree(sft)  # the ancestor is gone and the adapter moved: the records still name them
    (tmp_path / "kept").mkdir()
    moved = shutil.move(grpo, tmp_path / "kept" / "adapter")
    assert policy_lineage(base, str(moved), 5) == [
        f"tiny-qwen+{RUN_ID}",
        "tiny-qwen+sft-20261126T100000-00000001",
        "tiny-qwen",
    ]
    assert policy_lineage(base, str(moved), 0) == [f"tiny-qwen+{RUN_ID}"]

    # an adapter trajlake did not train: its parent entry keeps the name it had when training started
    external = adapter_folder(tmp_path / "hub" / "my-lora", weights=b"lora-c", run_id=None)
    name = adapter_label(str(external))
    child = adapter_folder(
        tmp_path / "grpo-2" / "adapter",
        weights=b"lora-d",
        run_id="grpo-2",
        parent=parent_record(str(external)),
    )
    shutil.rmtree(external)
    assert policy_lineage(base, str(child), 5) == ["tiny-qwen+grpo-2", f"tiny-qwen+{name}", "tiny-qwen"]
