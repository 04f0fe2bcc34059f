"""Samplers: one interface (prompt token ids in; n completions with token ids, logprobs, finish reason out).

Backends: `transformers` (default, CPU/GPU), `vllm-server` (HTTP to `vllm serve`), `vllm`
(in-process engine, optional extra). Build one with `make_sampler`.
"""

from __future__ import annotations

from typing import Any

from training.errors import SamplerError
from training.samplers.base import (
    Completion,
    FinishReason,
    Sampler,
    SampleRequest,
    SamplingParams,
    adapter_name,
)

BACKENDS = ("transformers", "vllm-server", "vllm")


def make_sampler(backend: str, model: str, **options: Any) -> Sampler:
    """Build the sampler for `backend` on `model` (a local folder, or the served name for vllm-server).

    Common options: `adapter` (LoRA path), `tokenizer` (path, defaults to `model`).
    transformers: `device`, `dtype`, `max_batch_rows`, `share_prefill` (prefill a prompt once for its n samples). vllm-server: `base_url`, `api_key`,
    `served_model`, `max_concurrency`, `timeout_s`, `retries`. vllm: `max_lora_rank`,
    `gpu_memory_utilization`, `max_model_len`, `engine_kwargs`.
    """
    if backend == "transformers":
        from training.samplers.hf import TransformersSampler

        return TransformersSampler(model, **options)
    if backend == "vllm-server":
        from training.samplers.vllm_server import VLLMServerSampler

        return VLLMServerSampler(model, **options)
    if backend == "vllm":
        from training.samplers.vllm_engine import VLLMEngineSampler

        return VLLMEngineSampler(model, **options)
    raise SamplerError(
        f"unknown sampler backend `{backend}`; choose one of: {', '.join(BACKENDS)}",
        backend=backend,
        reason="unknown_backend",
    )


__all__ = [
    "BACKENDS",
    "Completion",
    "FinishReason",
    "SampleRequest",
    "Sampler",
    "SamplingParams",
    "adapter_name",
    "make_sampler",
]
