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
