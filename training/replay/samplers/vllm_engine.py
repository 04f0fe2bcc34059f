"""The `vllm` backend: vLLM's in-process engine (`LLM`), from the optional `[vllm]` extra.

vLLM is imported only when this backend is built, so nothing else needs it installed. The
engine runs with `logprobs_mode="processed_logprobs"` (logprobs after temperature/top-k/top-p,
like the other backends), prefix caching on (the `n` samples of a prompt share its KV
blocks), and LoRA enabled so adapters can be given per request by path.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from training.replay.errors import SamplerError
from training.replay.samplers.base import Completion, Sampler, SampleRequest, adapter_name


class VLLMEngineSampler(Sampler):
    """Sample with `vllm.LLM` in this process (needs vLLM and a GPU)."""

    backend = "vllm"
    max_batch_requests = 1024  # the engine schedules its own batches; hand it everything waiting

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        tokenizer: str | None = None,
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
                "backend `vllm` needs vLLM: `pip install 'trajlake[vllm]'` on a CUDA machine, or use "
                "`--backend vllm-server` against a running `vllm serve`, or `--backend transformers`",
                backend=self.backend,
                reason="not_installed",
            ) from exc
        self._vllm = vllm
        kwargs: dict[str, Any] = {
            "model": model,
            "tokenizer": self.tokenizer_path,
            "enable_lora": True,
            "max_lora_rank": max_lora_rank,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(engine_kwargs or {})
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

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        from vllm import SamplingParams as VSamplingParams

        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [
            VSamplingParams(
                n=r.n,
                max_tokens=r.params.max_tokens,
                temperature=r.params.temperature,
                top_p=r.params.top_p,
                top_k=r.params.top_k if r.params.top_k > 0 else -1,
                seed=r.params.seed,
                stop_token_ids=list(r.params.stop_token_ids) or None,
                logprobs=0,
                skip_special_tokens=False,
            )
            for r in requests
        ]
        loras = [self._lora_request(r.adapter) for r in requests]
        with self._lock:
            outputs = self._llm.generate(prompts, params, lora_request=loras, use_tqdm=False)
        return [completions_from_request_output(out) for out in outputs]


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
