"""The vLLM server as trajlake starts it (`VLLMServerProcess`) under the requests
`serve-sampler` refuses (issue 45 item 5): the same limits answered 400 before vLLM sees
them (its `--middleware`), unknown models 404 (vLLM's own answer), a truncated adapter
refused when hot-loaded, and the API server's memory bounded under the abuse."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from training.replay.rollout.request_limits import RequestLimits

pytestmark = pytest.mark.vllm

MIB = 1 << 20
LIMITS = RequestLimits(max_n=4, max_tokens=64, max_prompt_chars=5000, max_body_bytes=MIB)


@pytest.fixture(scope="module")
def bounded_server(
    pretrained_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    pytest.importorskip("vllm")
    from training.replay.samplers.vllm_launch import VLLMServerProcess

    log = tmp_path_factory.mktemp("vllm-bounds") / "server.log"
    server = VLLMServerProcess(
        pretrained_model, log_path=log, max_lora_rank=8, max_model_len=2048, limits=LIMITS
    )
    with server as url:
        assert server.pid is not None
        yield url, server.pid


def truncated_adapter(pretrained_model: Path, folder: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    get_peft_model(AutoModelForCausalLM.from_pretrained(pretrained_model), lora).save_pretrained(folder)
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


def test_vllm_as_trajlake_starts_it_refuses_what_serve_sampler_refuses(
    bounded_server: tuple[str, int], pretrained_model: Path, tmp_path: Path
) -> None:
    url, pid = bounded_server
    model = str(pretrained_model)
    good = {"model": model, "prompt": [5, 17, 42], "max_tokens": 4}
    assert httpx.post(f"{url}/v1/completions", json=good, timeout=120).status_code == 200
    api_server = psutil.Process(pid)
    before = api_server.memory_info().rss

    def big_body() -> Iterator[bytes]:
        yield b'{"model": "m", "prompt": "'
        for _ in range(64):
            yield b"x" * MIB

    for _ in range(3):
        for body, status, words in (
            ({**good, "n": 1_000_000}, 400, "from 1 to 4"),
            ({**good, "max_tokens": 1_000_000_000}, 400, "from 1 to 64"),
            ({**good, "prompt": "x" * 6000}, 400, "the limit is 5,000"),
            ([[[]]], 400, "must be a JSON object"),
            ({**good, "model": "../../etc"}, 404, ""),  # vLLM's own answer
        ):
            answer = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            assert answer.status_code == status and words in answer.text, answer.text
        streamed = httpx.post(
            f"{url}/v1/completions",
            content=big_body(),
            headers={"content-type": "application/json"},
            timeout=60,
        )
        assert streamed.status_code == 400 and "1,048,576 bytes" in streamed.text

    bad = truncated_adapter(pretrained_model, tmp_path / "adapter")
    loaded = httpx.post(
        f"{url}/v1/load_lora_adapter", json={"lora_name": "bad", "lora_path": str(bad)}, timeout=60
    )
    assert loaded.status_code == 400 and "not a complete safetensors file" in loaded.text, loaded.text
    assert httpx.post(f"{url}/v1/completions", json={**good, "model": "bad"}, timeout=60).status_code == 404
    shutil.rmtree(bad)

    grown_mb = (api_server.memory_info().rss - before) / MIB
    assert grown_mb < 128, f"the API server grew by {grown_mb:.0f} MiB"
    start = time.monotonic()
    assert httpx.post(f"{url}/v1/completions", json=good, timeout=120).status_code == 200
    assert time.monotonic() - start < 60
