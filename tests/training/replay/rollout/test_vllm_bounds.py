"""The vLLM server as trajlake starts it (`VLLMServerProcess`) under the requests
`serve-sampler` refuses (issue 45 item 5): the same limits answered 400 before vLLM sees
them (its `--middleware`), unknown models 404 (vLLM's own answer), a truncated adapter
refused when hot-loaded, and the API server's memory bounded under the abuse."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from training.replay.rollout.request_limits import RequestLimits
from training.replay.samplers.vllm_launch import VLLMServerProcess

pytestmark = pytest.mark.vllm

MIB = 1 << 20
LIMITS = RequestLimits(max_n=4, max_tokens=64, max_prompt_chars=5000, max_body_bytes=MIB)


@pytest.fixture(scope="module")
def bounded_server(
    pretrained_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    pytest.importorskip("vllm")

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


# Bodies of 64 MiB streamed per abusive round, and rounds: enough that a server keeping any
# of what it read (1 MiB per body at most) would hold more than the allowance below.
STREAMED, ROUNDS = 4, 3


def test_vllm_as_trajlake_starts_it_refuses_what_serve_sampler_refuses(
    bounded_server: tuple[str, int], pretrained_model: Path, tmp_path: Path
) -> None:
    url, pid = bounded_server
    model = str(pretrained_model)
    good = {"model": model, "prompt": [5, 17, 42], "max_tokens": 4}
    api_server = psutil.Process(pid)
    bad = truncated_adapter(pretrained_model, tmp_path / "adapter")

    def big_body() -> Iterator[bytes]:
        yield b'{"model": "m", "prompt": "'
        for _ in range(64):
            yield b"x" * MIB

    refused = [
        ({**good, "n": 1_000_000}, 400, "from 1 to 4"),
        ({**good, "max_tokens": 1_000_000_000}, 400, "from 1 to 64"),
        ({**good, "prompt": "x" * 6000}, 400, "the limit is 5,000"),
        ([[[]]], 400, "must be a JSON object"),
        ({**good, "model": "../../etc"}, 404, ""),  # vLLM's own answer
        ({**good, "seed": 2**80}, 400, "`seed` must be an integer"),
        ({**good, "prompt": [-5]}, 400, "must hold token ids"),
        ({**good, "prompt": [[[[5]]]]}, 400, "must hold token ids"),
        ({**good, "min_tokens": 10**9}, 400, "`min_tokens` must be an integer"),
        ({**good, "logprobs": 10**6}, 400, "`logprobs` must be"),
        ({**good, "logit_bias": {"99999999999999": 1}}, 400, "keys must be token ids"),
    ]

    def abusive_round() -> int:
        for body, status, words in refused:
            answer = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            assert answer.status_code == status and words in answer.text, answer.text
        for body in ([1, 2], "adapter", {"lora_name": "a", "lora_path": 5}):
            answer = httpx.post(f"{url}/v1/load_lora_adapter", json=body, timeout=60)
            assert answer.status_code == 400, answer.text
        loaded = httpx.post(
            f"{url}/v1/load_lora_adapter", json={"lora_name": "bad", "lora_path": str(bad)}, timeout=60
        )
        assert loaded.status_code == 400 and "not a complete safetensors file" in loaded.text, loaded.text
        with ThreadPoolExecutor(STREAMED) as pool:
            streamed = pool.map(
                lambda _: httpx.post(
                    f"{url}/v1/completions",
                    content=big_body(),
                    headers={"content-type": "application/json"},
                    timeout=60,
                ),
                range(STREAMED),
            )
            for answer in streamed:
                assert answer.status_code == 400 and "1,048,576 bytes" in answer.text
        return len(refused) + 4 + STREAMED

    def good_round(requests: int) -> None:
        for _ in range(requests):
            assert httpx.post(f"{url}/v1/completions", json=good, timeout=120).status_code == 200

    # Every kind of request once first: what the server keeps from the first of each (vLLM's
    # lazy set-up, the adapter check's imports) is what any server keeps, not what abuse costs.
    requests = abusive_round()
    good_round(requests)
    start = api_server.memory_info().rss
    for _ in range(ROUNDS):
        good_round(requests)
    after_good = api_server.memory_info().rss
    for _ in range(ROUNDS):
        abusive_round()
    after_abuse = api_server.memory_info().rss
    good_mib, abuse_mib = (after_good - start) / MIB, (after_abuse - after_good) / MIB
    # The refused requests hold no more than as many good ones did, give or take a few bodies'
    # limit (the allocator keeps some of what it freed): a server that kept what it read of
    # the 4 x 3 streamed bodies, or anything a million-completion request asks for, would not.
    allowance_mib = max(good_mib, 0) + 4 * LIMITS.max_body_bytes / MIB
    assert abuse_mib <= allowance_mib, (
        f"the API server grew by {abuse_mib:.1f} MiB over {ROUNDS * requests} refused requests, "
        f"by {good_mib:.1f} MiB over as many good ones (allowed {allowance_mib:.1f})"
    )
    assert httpx.post(f"{url}/v1/completions", json={**good, "model": "bad"}, timeout=60).status_code == 404
    shutil.rmtree(bad)
    began = time.monotonic()
    assert httpx.post(f"{url}/v1/completions", json=good, timeout=120).status_code == 200
    assert time.monotonic() - began < 60
