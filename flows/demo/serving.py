"""The demo's serving: a vLLM server of the base model, and a production batch answered by a
published adapter (through `trajlake serve-sampler`'s app, or hot-loaded into that vLLM server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.demo.capture import capture_production_traces
from flows.sampler_server import sampler_app
from store.rows import served_adapter_name
from training.replay.samplers import SamplingParams
from training.replay.samplers.vllm_launch import VLLMServerProcess
from training.serving import load_into_vllm

TEMPERATURE = 0.8  # the policy's sampling temperature: replay, evaluation and serving alike


def demo_vllm_server(model: Path, workdir: Path, max_new_tokens: int) -> Any:
    """A vLLM server of the demo's base model: fp32 (the trainer's dtype), LoRA hot-loading, Hermes
    tool calls for the agent, and the demo's sampling defaults for requests that set none."""
    defaults = json.dumps({"temperature": TEMPERATURE, "max_new_tokens": max_new_tokens})
    return VLLMServerProcess(
        model,
        log_path=workdir / "vllm-server.log",
        max_loras=8,
        max_model_len=2048,
        # A round's 384 rollouts at once: each holds ~150 tokens of its own beside the shared
        # prefixes (SmolLM2 in float32: 46 KB a token), more than 1 GiB's 23,000 tokens.
        kv_cache_gib=4,
        extra_args=(
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--override-generation-config",
            defaults,
        ),
    )


def serve_second_batch(
    lake: Path,
    model: Path | str,
    published: dict[str, Any],
    questions: int,
    max_new_tokens: int,
    seed: int = 1,
    vllm_url: str | None = None,
    task: str = "simple",
) -> dict[str, Any]:
    """New questions, the same instrumented agent, the published adapter as its LLM: `trajlake
    serve-sampler`'s app serving `calculator-agent:<version>` under its served name, or the
    vLLM server at `vllm_url` after the version is hot-loaded into it (`publish --load-into`)."""
    if vllm_url:
        served = served_adapter_name(published["name"], published["version"])
        load_into_vllm(vllm_url, served, published["path"], replaces=published["name"])
        stats = capture_production_traces(
            lake, questions, seed=seed, llm_url=vllm_url, model=served, concurrency=64, task=task
        )
        return {**stats, "model": served, "success": stats["correct"] / max(1, stats["agent_runs"])}
    ref = f"{published['name']}:{published['version']}"
    # 64 agents at once (the micro-batcher's batch): at 16, SmolLM2's 300 runs took 474 s of
    # small-batch decoding on 2 cores (2026-11-29), a fifth of the demo.

    defaults = SamplingParams(temperature=TEMPERATURE, max_tokens=max_new_tokens)
    app, sampler, served = sampler_app(str(model), ref, lake=str(lake), defaults=defaults)
    with sampler:
        stats = capture_production_traces(
            lake, questions, seed=seed, llm_app=app, model=served, concurrency=64, task=task
        )
    return {**stats, "model": served, "success": stats["correct"] / max(1, stats["agent_runs"])}
