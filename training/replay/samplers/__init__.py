"""Samplers: one interface (prompt token ids in; n completions with token ids, logprobs, finish reason out).

Backends: `transformers` (default, CPU/GPU), `vllm-server` (HTTP to `vllm serve`), `vllm`
(in-process engine, optional extra). Build one with `make_sampler`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from training.replay.errors import SamplerError
from training.replay.samplers.base import (
    Completion,
    FinishReason,
    Sampler,
    SampleRequest,
    SamplingParams,
    adapter_name,
)
from training.replay.samplers.hf import TransformersSampler
from training.replay.samplers.vllm_engine import VLLMEngineSampler
from training.replay.samplers.vllm_server import VLLMServerSampler

BACKENDS = ("transformers", "vllm-server", "vllm")
Backend = Literal["transformers", "vllm-server", "vllm"]
Dtype = Literal["float32", "bfloat16", "float16"]
DTYPES: tuple[str, ...] = get_args(Dtype)


@dataclass(frozen=True)
class SamplerConfig:
    """Which model samples, and on which backend."""

    backend: Backend = field(
        default="transformers",
        metadata={
            "help": "Sampler backend: transformers (CPU/GPU), vllm-server (a running `vllm serve`), "
            "vllm (in-process engine: vLLM installed beside trajlake, see `.ci/vllm-env`)."
        },
    )
    model: str = field(
        default="",
        metadata={
            "help": "Base model folder or hub id (the served base model's name for vllm-server); "
            "required: nothing samples or trains without one.",
            "path": True,
        },
    )
    tokenizer: str | None = field(default=None, metadata={"help": "Tokenizer folder (default: the model)."})
    dtype: Dtype | None = field(
        default=None,
        metadata={
            "help": "Precision the model samples in (transformers, vllm): float32, bfloat16 or float16; "
            "default: bfloat16 on a GPU, float32 on a CPU. On a CPU with native bfloat16 (AVX512-BF16, "
            "AMX) a replay round ran 1.5-1.8x faster in bfloat16; its logprobs are no longer the float32 trainer's, so "
            "GRPO should weigh them (`train.grpo.vllm_importance_sampling_correction`). A CPU without "
            "emulates 16-bit matmuls (0.3 GFLOP/s in bfloat16 on an AVX2-only EPYC): the sampler warns at load."
        },
    )
    base_url: list[str] | str = field(
        default="http://127.0.0.1:8000",
        metadata={
            "help": "URL of `vllm serve` (backend vllm-server); several (a list, or --base-url repeated): each "
            "request goes whole to the one with the fewest in flight, a failing one is skipped for a while."
        },
    )
    api_key: str | None = field(
        default=None, metadata={"help": "API key of the vLLM server.", "env": "TRAJLAKE_VLLM_API_KEY"}
    )

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SamplerError(
                f"unknown sampler backend `{self.backend}`; choose one of: {', '.join(BACKENDS)}",
                backend=self.backend,
                reason="unknown_backend",
            )
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"unknown sampler dtype `{self.dtype}`; choose one of: {', '.join(DTYPES)}")
        if self.dtype is not None and self.backend == "vllm-server":
            raise ValueError(
                "`dtype` is the server's own with backend vllm-server (`vllm serve --dtype`); leave it unset"
            )

    def build(self, adapter: str | None = None, *, model: str | None = None) -> Sampler:
        """The sampler for this configuration, sampling through `adapter` (None: the base model)."""
        options: dict[str, Any] = {"adapter": adapter, "tokenizer": self.tokenizer}
        if self.backend == "vllm-server":
            options.update(base_url=self.base_url, api_key=self.api_key)
        else:  # None: the backend's default precision
            options["dtype"] = self.dtype
        return make_sampler(self.backend, model or self.model, **options)


def make_sampler(backend: str, model: str, **options: Any) -> Sampler:
    """Build the sampler for `backend` on `model` (a local folder, or the served name for vllm-server).

    Common options: `adapter` (LoRA path), `tokenizer` (path, defaults to `model`).
    transformers: `device`, `dtype`, `max_batch_rows`, `max_batch_tokens`, `shared_prefix` (the shared-prefix decode, default;
    False: `generate`), `merge_adapters` (through a LoRA adapter, sample with its delta
    merged into copies of float32 weights, or stacked under 16-bit ones, default; False: PEFT's forward),
    `pack_weights` (on a CPU, float32 linear layers multiply through weights packed once for MKL,
    default; False: `F.linear`), `share_prefill` (on the
    `generate` path, prefill a prompt once for its n samples). vllm-server: `base_url`, `api_key`,
    `served_model`, `max_samples_in_flight`, `timeout_s`, `retries`. vllm: `max_lora_rank`,
    `gpu_memory_utilization`, `max_model_len`, `engine_kwargs`.
    """
    if backend == "transformers":
        return TransformersSampler(model, **options)
    if backend == "vllm-server":
        return VLLMServerSampler(model, **options)
    if backend == "vllm":
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
    "SamplerConfig",
    "SamplingParams",
    "adapter_name",
    "make_sampler",
]
