"""Transformers backend specifics: shared prefill for the n samples of a prompt changes nothing but speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.replay.samplers import make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_shared_prefill_matches_per_row_prefill(tiny_model: Path, temperature: float) -> None:
    shared = make_sampler("transformers", str(tiny_model), share_prefill=True)
    plain = make_sampler("transformers", str(tiny_model), share_prefill=False)
    tok = shared.tokenizer
    long = tuple(
        tok.encode("<|im_start|>user\nWhat is 12 * 7? Use the calculator.<|im_end|>\n<|im_start|>assistant\n")
    )
    short = tuple(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    params = SamplingParams(max_tokens=8, temperature=temperature, seed=11)
    requests = [
        SampleRequest(long, 3, params),
        SampleRequest(short, 2, params),
        SampleRequest(long[:-4], 1, params),
    ]
    a, b = shared.generate(requests), plain.generate(requests)
    for group_a, group_b in zip(a, b, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert x.token_ids == y.token_ids  # same seed, same distribution: same samples
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_a_sample_depends_on_its_seed_not_its_batch(tiny_model: Path) -> None:
    """Seeded requests get the same tokens alone or batched with others, and sample `j` of a request
    with seed `s` is the request for one sample with seed `s + j` (vLLM's convention)."""
    sampler = make_sampler("transformers", str(tiny_model))
    tok = sampler.tokenizer
    prompt = tuple(tok.encode("<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n"))
    other = tuple(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=21)
    (alone,) = sampler.generate([SampleRequest(prompt, 3, params)])
    batched = sampler.generate(
        [
            SampleRequest(other, 2, params.with_seed(4)),
            SampleRequest(prompt, 3, params),
            SampleRequest(prompt[:-3], 1, params.with_seed(None)),
        ]
    )[1]
    one_by_one = [
        c
        for seed in (21, 22, 23)
        for c in sampler.generate([SampleRequest(prompt, 1, params.with_seed(seed))])[0]
    ]
    for x, y, z in zip(alone, batched, one_by_one, strict=True):
        assert x.token_ids == y.token_ids == z.token_ids
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4) and x.logprobs == pytest.approx(
            z.logprobs, abs=1e-4
        )
    # One prompt, three seeds: three different samples (the diversity a GRPO group needs).
    assert len({c.token_ids for c in alone}) == 3


def test_greedy_leaves_the_global_generator_alone(tiny_model: Path) -> None:
    import torch

    sampler = make_sampler("transformers", str(tiny_model))
    prompt = tuple(sampler.tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    before = torch.get_rng_state()
    sampler.generate([SampleRequest(prompt, 2, SamplingParams(max_tokens=4, temperature=0.0))])
    assert torch.equal(before, torch.get_rng_state())
