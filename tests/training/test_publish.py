"""Publishing: PEFT round trip, manifest lineage, atomic aliases, vLLM checks, eval gate, hot-load, hub args."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from transformers import TrainerCallback

from flows.cli import app
from store.catalog.connection import scan
from store.catalog.versions import snapshot
from store.lake import Lake
from store.writer import write
from tests.training.train_helpers import stored_groups
from training.errors import (
    AdapterNotFound,
    AdapterNotServable,
    BadHyperparameter,
    PromotionRefused,
    PublishError,
)
from training.grpo import train_grpo
from training.grpo_config import TrajlakeGRPOConfig
from training.lineage import digest_ids
from training.publish import EvalGate, PublishConfig, publish
from training.registry import adapter_rows, read_manifest, resolve_adapter
from training.replay.rollout.openai_app import LoopbackServer, create_app
from training.replay.samplers import make_sampler
from training.run import TrainResult
from training.serving import load_into_vllm, vllm_problems
from training.sft import train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

PROBE = [[5, 17, 42, 99, 7, 300, 12, 64]]


class CaptureLogits(TrainerCallback):
    """Logits of the model as trained (in memory) on a fixed probe, taken when training ends."""

    def __init__(self) -> None:
        self.logits: torch.Tensor | None = None

    def on_train_end(self, args, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
        model.eval()
        with torch.no_grad():
            self.logits = model(torch.tensor(PROBE)).logits.float().clone()


@pytest.fixture(scope="module")
def trained(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Lake, TrainResult, torch.Tensor]:
    """A lake with conversations and scored groups, an SFT adapter and a GRPO adapter continued from it."""
    tmp = tmp_path_factory.mktemp("publish")
    lake = Lake(str(tmp / "lake"))
    rows, rewards = stored_groups(str(tiny_model), groups=2, size=4, multi_turn=False)
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    common = dict(
        activation_checkpointing=False, save_strategy="no", seed=0, disable_tqdm=True, learning_rate=1e-2
    )
    sft = train_sft(
        lake,
        "SELECT trajectory_id FROM trajectories",
        tiny_model,
        tmp / "sft",
        TrajlakeSFTConfig(
            output_dir="x", max_steps=2, per_device_train_batch_size=2, max_length=256, **common
        ),
    )
    capture = CaptureLogits()
    grpo = train_grpo(
        lake,
        "SELECT trajectory_id FROM trajectories WHERE group_id = 'g0'",
        tiny_model,
        sft.adapter_dir,
        tmp / "grpo",
        TrajlakeGRPOConfig(output_dir="x", max_steps=2, per_device_train_batch_size=2, **common),
        callbacks=[capture],
    )
    assert capture.logits is not None
    return lake, grpo, capture.logits


def test_published_adapter_reproduces_trained_logits(trained, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lake, grpo, logits = trained
    published = publish(lake, grpo.adapter_dir, PublishConfig(name="logits-check"))
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), published.path).eval()
    with torch.no_grad():
        reloaded = model(torch.tensor(PROBE)).logits.float()
    torch.testing.assert_close(reloaded, logits, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(tiny_model)(torch.tensor(PROBE)).logits.float()
    assert not torch.allclose(base, logits, atol=1e-4)  # the adapter really changed the model


def test_manifest_lineage_names_the_rows(trained) -> None:  # type: ignore[no-untyped-def]
    lake, grpo, _ = trained
    published = publish(lake, grpo.adapter_dir, PublishConfig(name="lineage"))
    manifest = read_manifest(published.path)
    assert Path(published.path, "manifest.json").exists()
    assert manifest["stages"] == ["sft", "grpo"] and manifest["run_ids"] == grpo.run_ids
    assert manifest["base_model"] == grpo.base_model
    sft_lineage, grpo_lineage = manifest["lineage"]
    assert sft_lineage["stage"] == "sft" and sft_lineage["trajectory_count"] == 8
    assert grpo_lineage["sql"].endswith("group_id = 'g0'")
    assert grpo_lineage["trajectory_ids_digest"] == digest_ids([f"g0-{k}" for k in range(4)])
    assert grpo_lineage["reward_name"] == "correct" and grpo_lineage["reward_scorers"] == ["tests.reward@1"]
    assert grpo_lineage["table_versions"]["rewards"]["version"] == snapshot(lake)["rewards"].version
    assert manifest["hyperparameters"]["grpo"]["loss_type"] == "dapo"
    assert manifest["hyperparameters"]["sft"]["lora_r"] == 16
    assert set(manifest["files"]) >= {"adapter_config.json", "adapter_model.safetensors", "trajlake_run.json"}
    row = resolve_adapter(lake, f"lineage:{published.version}")
    assert row["stages"] == ["sft", "grpo"] and row["run_id"] == grpo.run_id
    assert json.loads(row["data"])[1]["trajectory_ids_digest"] == grpo_lineage["trajectory_ids_digest"]


def test_aliases_move_atomically(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lake, grpo, _ = trained
    registry = str(tmp_path / "elsewhere")
    v1 = publish(
        lake,
        grpo.adapter_dir,
        PublishConfig(name="agent", registry=registry),
        aliases=["latest", "production"],
    )
    v2 = publish(lake, grpo.adapter_dir, PublishConfig(name="agent", registry=registry))
    assert (v1.version, v2.version) == (1, 2) and v2.moved_from == {"latest": 1}
    assert v2.path.startswith(registry) and v1.path != v2.path  # every version gets a fresh folder
    assert resolve_adapter(lake, "agent:production")["version"] == 1
    assert resolve_adapter(lake, "agent")["version"] == 2  # `latest` by default
    assert resolve_adapter(lake, "agent:1")["aliases"] == ["production"]
    # The move was one commit: the version before it has the old aliases, the one after the new ones.
    version = snapshot(lake)["adapters"].version

    def aliases_at(version: int) -> dict:
        rows = scan(lake, "adapters", version=version).collect().to_dicts()
        return {r["version"]: r["aliases"] for r in rows if r["name"] == "agent"}

    assert aliases_at(version) == {2: ["latest"], 1: ["production"]}
    assert aliases_at(version - 1) == {1: ["latest", "production"]}


def test_unservable_adapter_is_refused_before_writing(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lake, grpo, _ = trained
    bad = tmp_path / "dora"
    shutil.copytree(grpo.adapter_dir, bad)
    config = json.loads((bad / "adapter_config.json").read_text())
    (bad / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True, "r": 24}))
    with pytest.raises(AdapterNotServable) as err:
        publish(lake, bad, PublishConfig(name="dora", registry=str(tmp_path / "reg")))
    assert any("DoRA" in p for p in err.value.problems) and any("rank 24" in p for p in err.value.problems)
    assert not (tmp_path / "reg").exists()
    with pytest.raises(AdapterNotFound):
        resolve_adapter(lake, "dora")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"r": 64}, "exceeds the server's --max-lora-rank 16"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"bias": "all"}, "bias `all`"),
        ({"init_lora_weights": "pissa_niter_4"}, "init_lora_weights"),
        ({"target_modules": []}, "no target_modules"),
    ],
)
def test_vllm_problems(change: dict, problem: str) -> None:
    config = {"peft_type": "LORA", "r": 16, "target_modules": ["q_proj"], "bias": "none", **change}
    assert any(problem in p for p in vllm_problems(config))


def test_gate_refuses_a_worse_adapter_unless_forced(trained) -> None:  # type: ignore[no-untyped-def]
    lake, grpo, _ = trained
    # The evaluation said: candidate 0.4 against the base model's 0.5, paired difference -0.1.
    gate = EvalGate(0.4, 0.5, "base", difference=-0.1, difference_ci=(-0.2, 0.0), scenarios=10, reward="r")
    with pytest.raises(PromotionRefused) as err:
        publish(
            lake, grpo.adapter_dir, PublishConfig(name="gated"), aliases=["latest", "production"], gate=gate
        )
    assert (err.value.candidate, err.value.incumbent, err.value.incumbent_name) == (0.4, 0.5, "base")
    assert "95% CI -0.2000 to +0.0000" in str(err.value)
    with pytest.raises(AdapterNotFound):
        resolve_adapter(lake, "gated")  # nothing published

    # A better mean whose interval still reaches zero is not better either: the decision is the paired CI.
    unsure = EvalGate(0.6, 0.5, "base", difference=0.1, difference_ci=(-0.05, 0.25), scenarios=10, reward="r")
    assert not unsure.better and not unsure.promoted
    latest_only = publish(
        lake, grpo.adapter_dir, PublishConfig(name="gated"), aliases=["latest"], gate=unsure
    )
    assert latest_only.aliases == ["latest"] and read_manifest(latest_only.path)["eval"]["promoted"] is False

    gate.forced = True
    forced = publish(
        lake, grpo.adapter_dir, PublishConfig(name="gated"), aliases=["latest", "production"], gate=gate
    )
    assert forced.gate is not None and forced.gate.forced and forced.gate.promoted
    assert read_manifest(forced.path)["eval"]["candidate"] == 0.4
    assert resolve_adapter(lake, "gated:production")["version"] == 2


def test_load_into_vllm_protocol_server(trained, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]

    lake, grpo, _ = trained
    with make_sampler("transformers", str(tiny_model)) as sampler, LoopbackServer(create_app(sampler)) as url:
        published = publish(lake, grpo.adapter_dir, PublishConfig(name="served", load_into=url))
        assert published.loaded_into == f"served-v{published.version}"
        models = httpx.get(f"{url}/v1/models").json()["data"]
        served = {m["id"]: m for m in models}
        assert served["served-v1"]["root"] == published.path  # the server loaded the registry copy
        with pytest.raises(PublishError, match="refused adapter `served-v1`"):  # loading the same name twice
            load_into_vllm(url, "served-v1", published.path)


def test_load_into_several_servers_says_which_failed(trained, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]

    lake, grpo, _ = trained
    with (
        make_sampler("transformers", str(tiny_model)) as first,
        make_sampler("transformers", str(tiny_model)) as second,
        LoopbackServer(create_app(first)) as url_a,
        LoopbackServer(create_app(second)) as url_b,
    ):
        down = "http://127.0.0.1:9"  # nothing listens there
        with pytest.raises(
            PublishError, match=r"loaded into 2 of 3 servers; not into http://127.0.0.1:9 "
        ) as err:
            publish(lake, grpo.adapter_dir, PublishConfig(name="multi", load_into=[url_a, down, url_b]))
        assert "could not reach vLLM" in str(err.value)
        assert resolve_adapter(lake, "multi:latest")["version"] == 1  # published all the same
        for url in (url_a, url_b):
            models = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
            assert "multi-v1" in models  # loaded into both servers that answer


def test_hub_arguments_are_checked_before_publishing(trained) -> None:  # type: ignore[no-untyped-def]
    lake, _, _ = trained
    with pytest.raises(BadHyperparameter) as err:
        PublishConfig(name="hub", push_to_hub="me/agent", hub_token=None)
    assert err.value.field == "hub_token" and "HF_TOKEN" in str(err.value)
    with pytest.raises(BadHyperparameter) as err:
        PublishConfig(name="hub", push_to_hub="not a repo", hub_token="hf_x")
    assert err.value.field == "push_to_hub"
    with pytest.raises(AdapterNotFound):
        resolve_adapter(lake, "hub")


def test_bad_names(trained) -> None:  # type: ignore[no-untyped-def]
    lake, grpo, _ = trained
    with pytest.raises(BadHyperparameter):
        PublishConfig(name="../escape")
    with pytest.raises(BadHyperparameter):
        publish(
            lake, grpo.adapter_dir, PublishConfig(name="ok"), aliases=["3"]
        )  # a number would shadow version 3


# --- the command line ----------------------------------------------------------------------------


def test_cli_train_sft_then_grpo_then_publish(tiny_model: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    lake = Lake(str(tmp_path / "lake"))
    rows, rewards = stored_groups(str(tiny_model), groups=2, size=2, multi_turn=False)
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    runner = CliRunner()
    common = [
        "--lake",
        lake.root,
        "--base-model",
        str(tiny_model),
        "--max-steps",
        "1",
        "--set",
        "activation_checkpointing=false",
    ]
    sft = runner.invoke(
        app,
        # the rows are replays, which the default SFT selection (production conversations) leaves out
        [
            "train",
            "sft",
            "-o",
            str(tmp_path / "sft"),
            "--max-length",
            "128",
            "--batch-size",
            "2",
            *common,
            "--sql",
            "SELECT trajectory_id FROM trajectories",
        ],
    )
    assert sft.exit_code == 0, sft.output
    assert f"adapter: {tmp_path / 'sft' / 'adapter'}" in sft.output
    assert "{'loss'" not in sft.output  # the runs table and trajlake's summary, not TRL's raw dicts
    assert re.search(r"sft step 1/1: loss \d+\.\d{4}", sft.output), sft.output  # its progress, with the loss
    grpo = runner.invoke(
        app,
        [
            "train",
            "grpo",
            "-o",
            str(tmp_path / "grpo"),
            "--adapter",
            str(tmp_path / "sft" / "adapter"),
            "--batch-size",
            "2",
            "--loss-type",
            "grpo",
            *common,
        ],
    )
    assert grpo.exit_code == 0, grpo.output
    assert "{'loss'" not in grpo.output and "{'train_runtime'" not in grpo.output
    assert re.search(r"grpo step 1/1: loss -?\d+\.\d{4}", grpo.output), grpo.output
    out = runner.invoke(
        app,
        ["publish", str(tmp_path / "grpo" / "adapter"), "--name", "cli", "--production", "--lake", lake.root],
    )
    assert out.exit_code == 0, out.output
    assert "published cli:1" in out.output and "latest, production" in out.output
    assert read_manifest(resolve_adapter(lake, "cli:production")["path"])["stages"] == ["sft", "grpo"]

    # Errors are one clear line, no traceback, and nothing is trained.
    bad = runner.invoke(app, ["train", "grpo", "-o", str(tmp_path / "bad"), "--loss-type", "ppo", *common])
    assert bad.exit_code == 2 and "`loss_type`" in bad.output and "Traceback" not in bad.output
    typo = runner.invoke(
        app, ["train", "sft", "-o", str(tmp_path / "bad"), "--set", "warmup_step=3", *common]
    )
    assert typo.exit_code == 1 and "did you mean warmup_steps" in typo.output
    empty = runner.invoke(
        app,
        [
            "train",
            "sft",
            "-o",
            str(tmp_path / "bad"),
            "--sql",
            "SELECT trajectory_id FROM trajectories WHERE false",
            *common,
        ],
    )
    assert empty.exit_code == 1 and "matched no" in empty.output
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("latest_if_refused", [False, True])
def test_the_pipeline_moves_latest_only_with_a_promoted_version_unless_asked(  # type: ignore[no-untyped-def]
    trained, tiny_model: Path, tmp_path: Path, latest_if_refused: bool
) -> None:
    from flows.config.checks import load_config
    from flows.stages.evaluate import publish_adapter
    from judging.evaluate import Evaluation
    from judging.evaluation_stats import Comparison, PolicyScore

    lake, grpo, _ = trained
    name = f"nightly-{str(latest_if_refused).lower()}"
    path = tmp_path / "trajlake.toml"
    path.write_text(
        f'[lake]\npath = "{lake.root}"\n[sampler]\nmodel = "{tiny_model}"\n[publish]\nname = "{name}"\n'
        f"[pipeline]\nlatest_if_refused = {str(latest_if_refused).lower()}\n"
    )
    config = load_config(path)

    def evaluation(difference: float, ci: tuple[float, float]) -> Evaluation:
        comparison = Comparison(
            reward="r",
            candidate=PolicyScore("candidate", 0.5 + difference, (0.4, 0.9), 12),
            baseline=PolicyScore("base", 0.5, (0.4, 0.6), 12),
            difference=difference,
            difference_ci=ci,
            paired_scenarios=12,
        )
        return Evaluation(
            candidate="adapter", baseline="base", comparison=comparison, table=[], run_id="eval-x"
        )

    sections = {"pipeline": config.pipeline, "publish": config.publish, "sampler": config.sampler}
    better = publish_adapter(lake, grpo.adapter_dir, evaluation(0.2, (0.1, 0.3)), **sections)
    assert better.published and better.published.aliases == ["latest", "production"]
    assert better.gate.promoted and better.ref == f"{name}:v1"
    assert better.decision == f"{name}:v1 promoted: +0.200 [+0.100, +0.300] against base on 12 scenarios (r)"
    worse = publish_adapter(lake, grpo.adapter_dir, evaluation(-0.1, (-0.2, 0.05)), **sections)
    assert not worse.gate.promoted
    if latest_if_refused:  # asked for: published, as `latest` only
        assert worse.published and worse.published.aliases == ["latest"]
        assert worse.decision.startswith(f"{name}:v2 not promoted: -0.100 [-0.200, +0.050]")
    else:  # a refused candidate is not published: no version nobody may serve piles up
        assert worse.published is None and worse.ref is None
        assert worse.decision == (
            f"{name} candidate not promoted: -0.100 [-0.200, +0.050] against base on 12 scenarios (r); "
            f"not published (its folder: {grpo.adapter_dir})"
        )
        assert [r["version"] for r in adapter_rows(lake, name)] == [1]
    assert resolve_adapter(lake, f"{name}:production")["version"] == 1  # production stays on v1
    assert resolve_adapter(lake, f"{name}:latest")["version"] == (2 if latest_if_refused else 1)
