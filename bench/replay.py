"""Benchmark: the replay pipeline's generated tokens/s against the bare backend's, same prompts and settings.

    python bench/replay.py [--scenarios 16] [--group-size 4] [--max-tokens 64] [--repeats 3] [--backend transformers|vllm]

"Bare" is the backend called directly: one `model.generate(do_sample=True,
num_return_sequences=G)` over all rendered prompts for transformers, one
`LLM.generate(prompts, SamplingParams(n=G))` for vLLM. "Pipeline" is `training.replay.replay`
end to end: scenarios read from the lake, rendered, sampled through the sampler interface
(micro-batched), parsed, and every group written to the lake as Parquet. Both sample the same
prompts with the same group size and token budget; the model load and a warm-up are excluded.
Target: the pipeline keeps >= 90% of the bare backend's tokens/s (>= 95% on vLLM, where the
engine does the batching).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench.replay_rounds import rounds
from store.lake import Lake
from training.chat.render import ChatRenderer
from training.models.known import resolve_model
from training.replay.rollout.loop import RolloutLimits
from training.replay.samplers import SamplingParams, make_sampler
from training.replay.scenario_io import load_scenarios, read_scenarios
from training.replay.stage import ReplayConfig, replay
from training.tiny import TOOLS, tiny_model_path


def _scenarios_file(path: Path, count: int) -> Path:
    lines = [
        {
            "messages": [
                {
                    "role": "system",
                    "content": "You are a careful math assistant. Use the calculator tool when needed.",
                },
                {"role": "user", "content": f"What is {17 * i} + {3 * i + 1}?"},
            ],
            "tools": TOOLS,
        }
        for i in range(count)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


def scaling_workload(doc: str, prefix: str) -> tuple[argparse.Namespace, str, Lake]:
    """The scale-out benches' options and workload: (args, the tiny model, a lake of scenarios)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix=prefix))
    lake = Lake(str(work / "lake"))
    load_scenarios(lake, _scenarios_file(work / "scenarios.jsonl", args.scenarios))
    return args, str(tiny_model_path()), lake


def print_scaling(title: str, unit: str, rates: dict[int, list[float]]) -> None:
    """tokens/s per count of `unit` (servers, workers): the median of the runs and its ratio to one."""
    table = Table(title=title)
    for column in (unit, "tok/s (median)", "runs", "vs one"):
        table.add_column(column, justify="right")
    one = statistics.median(rates[1])
    for count, values in rates.items():
        rate = statistics.median(values)
        table.add_row(str(count), f"{rate:,.0f}", str([round(r) for r in values]), f"{rate / one:.2f}x")
    Console().print(table)


def bare_transformers(
    model_path: str, prompts: list[list[int]], group_size: int, max_tokens: int
) -> tuple[int, float]:
    """Tokens generated and seconds for one batched `generate` over every prompt, G samples each."""
    import torch
    from transformers import AutoModelForCausalLM

    model = _MODELS.setdefault(model_path, AutoModelForCausalLM.from_pretrained(model_path).eval())
    eos, pad = model.generation_config.eos_token_id, model.generation_config.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(p)
        mask[r, width - len(p) :] = 1
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_tokens,
            num_return_sequences=group_size,
            eos_token_id=eos,
            pad_token_id=pad,
            output_scores=True,
            return_dict_in_generate=True,
        )
        model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    elapsed = time.perf_counter() - started
    generated = out.sequences[:, width:].tolist()
    tokens = sum(next((j + 1 for j, t in enumerate(row) if t == eos), len(row)) for row in generated)
    return tokens, elapsed


_MODELS: dict[str, object] = {}


def bare_vllm(llm: object, prompts: list[list[int]], group_size: int, max_tokens: int) -> tuple[int, float]:
    from vllm import SamplingParams

    # What the `vllm` sampler asks for: processed logprobs of each sampled token, special tokens kept.
    params = SamplingParams(
        n=group_size, max_tokens=max_tokens, temperature=1.0, logprobs=0, skip_special_tokens=False
    )
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    return sum(len(o.token_ids) for out in outputs for o in out.outputs), elapsed


def vs_bare(argv: list[str]) -> None:
    """The pipeline against the bare backend (`--vs-bare`)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vs-bare", action="store_true")
    parser.add_argument("--scenarios", type=int, default=16, help="Scenarios (prompts) per run.")
    parser.add_argument("--group-size", type=int, default=4, help="Samples per scenario (G).")
    parser.add_argument("--max-tokens", type=int, default=64, help="Tokens per completion.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each; the median is reported.")
    parser.add_argument(
        "--backend", default="transformers", choices=["transformers", "vllm"], help="Backend to measure."
    )
    parser.add_argument("--dtype", default=None, help="vLLM's dtype (default: the trainer's).")
    parser.add_argument(
        "--model",
        default=None,
        help="Model folder, hub id or known name (`smollm2-135m-instruct`; default: the tiny model, built if needed).",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for both sides (0 = torch's default). On a shared, oversubscribed CPU, "
        "OpenMP barriers with >1 thread make timings swing 10x; 1 keeps the comparison fair.",
    )
    args = parser.parse_args(argv)
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    model = resolve_model(args.model) if args.model else str(tiny_model_path())
    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-replay-"))
    lake = Lake(str(work / "lake"))
    load_scenarios(lake, _scenarios_file(work / "scenarios.jsonl", args.scenarios))
    scenarios = read_scenarios(lake)

    rows_per_batch = args.scenarios * args.group_size
    samplers = {}
    if args.backend == "transformers":
        # Two pipelines: with the shared prefill (the default), and without it, which does exactly
        # the bare call's work, so its ratio isolates the pipeline's own overhead.
        samplers["pipeline"] = make_sampler("transformers", model, max_batch_rows=rows_per_batch)
        samplers["pipeline, no shared prefill"] = make_sampler(
            "transformers", model, max_batch_rows=rows_per_batch, share_prefill=False
        )
    else:
        import os

        # vLLM sizes its CPU KV cache from the machine unless told; 2 GiB holds every group here.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        samplers["pipeline"] = make_sampler(
            "vllm", model, dtype=args.dtype, engine_kwargs={"max_model_len": 4096}
        )
    for s in samplers.values():
        s.max_batch_requests = args.scenarios  # one batch for all first turns, like the bare call
    sampler = samplers["pipeline"]
    renderer = ChatRenderer(sampler.tokenizer)
    prompts = [renderer.prompt_ids(s.messages, s.tools) for s in scenarios]

    def bare() -> tuple[int, float]:
        if args.backend == "transformers":
            return bare_transformers(model, prompts, args.group_size, args.max_tokens)
        return bare_vllm(sampler._llm, prompts, args.group_size, args.max_tokens)  # type: ignore[attr-defined]

    def pipeline(name: str, run: str) -> tuple[int, float]:
        config = ReplayConfig(
            group_size=args.group_size,
            sampling=SamplingParams(max_tokens=args.max_tokens),
            limits=RolloutLimits(max_turns=1),
            concurrency=args.scenarios,
            flush_groups=args.scenarios,
            run=run,
        )
        started = time.perf_counter()
        result = replay(lake, "SELECT scenario_id FROM scenarios", samplers[name], config, progress=False)
        return result.generated_tokens, time.perf_counter() - started

    bare()  # warm-up: model load, kernels, allocator
    for name in samplers:
        pipeline(name, f"warmup-{name}")
    rates: dict[str, list[float]] = {"bare": [], **{name: [] for name in samplers}}
    for i in range(args.repeats):  # interleaved, so drift on a shared machine hits every side alike
        tokens, seconds = bare()
        rates["bare"].append(tokens / seconds)
        for name in samplers:
            tokens, seconds = pipeline(name, f"bench-{name}-{i}")
            rates[name].append(tokens / seconds)
    bare_rate = statistics.median(rates["bare"])

    table = Table(
        title=f"replay throughput ({args.backend}, {Path(model).name}, {args.scenarios} scenarios x G={args.group_size}, {args.max_tokens} tokens)"
    )
    for column in ("path", "tok/s (median)", "runs", "vs bare", "target"):
        table.add_column(column, justify="right")
    table.add_row("bare backend", f"{bare_rate:,.0f}", str([round(r) for r in rates["bare"]]), "100%", "")
    goal = 0.95 if args.backend == "vllm" else 0.9
    for name in samplers:
        rate = statistics.median(rates[name])
        ratio = rate / bare_rate
        verdict = f"[green]>= {goal:.0%} ok[/green]" if ratio >= goal else f"[red]< {goal:.0%}[/red]"
        table.add_row(name, f"{rate:,.0f}", str([round(r) for r in rates[name]]), f"{ratio:.1%}", verdict)
    Console().print(table)
    Console().print(
        "pipeline = replay(): scenarios from the lake, rendering, micro-batching, parsing, Parquet writes of every group"
    )


def main() -> None:
    if "--vs-bare" in sys.argv[1:]:
        vs_bare(sys.argv[1:])
    else:
        rounds(sys.argv[1:])


if __name__ == "__main__":
    main()
