"""Benchmark: the replay pipeline's generated tokens/s against the bare backend's, same prompts and settings.

    python bench/replay.py [--scenarios 16] [--group-size 4] [--max-tokens 64] [--repeats 3] [--backend transformers|vllm]

"Bare" is the backend called directly: one `model.generate(do_sample=True,
num_return_sequences=G)` over all rendered prompts for transformers, one
`LLM.generate(prompts, SamplingParams(n=G))` for vLLM. "Pipeline" is `training.replay.replay`
end to end: scenarios read from the lake, rendered, sampled through the sampler interface
(micro-batched), parsed, and every group written to the lake as Parquet. Both sample the same
prompts with the same group size and token budget; the model load and a warm-up are excluded.
Target: the pipeline keeps >= 90% of the bare backend's tokens/s.
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

import store
from training.replay import ReplayConfig, replay
from training.rollout.render import ChatRenderer
from training.samplers import make_sampler
from training.scenarios import load_scenarios, read_scenarios
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

    params = SamplingParams(n=group_size, max_tokens=max_tokens, temperature=1.0, logprobs=0)
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    return sum(len(o.token_ids) for out in outputs for o in out.outputs), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", type=int, default=16, help="Scenarios (prompts) per run.")
    parser.add_argument("--group-size", type=int, default=4, help="Samples per scenario (G).")
    parser.add_argument("--max-tokens", type=int, default=64, help="Tokens per completion.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each; the median is reported.")
    parser.add_argument(
        "--backend", default="transformers", choices=["transformers", "vllm"], help="Backend to measure."
    )
    parser.add_argument(
        "--model", default=None, help="Model folder (default: the tiny model, built if needed)."
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for both sides (0 = torch's default). On a shared, oversubscribed CPU, "
        "OpenMP barriers with >1 thread make timings swing 10x; 1 keeps the comparison fair.",
    )
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    model = args.model or str(tiny_model_path())
    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-replay-"))
    lake = store.Lake(str(work / "lake"))
    load_scenarios(lake, _scenarios_file(work / "scenarios.jsonl", args.scenarios))
    scenarios = read_scenarios(lake)

    rows_per_batch = args.scenarios * args.group_size
    if args.backend == "transformers":
        sampler = make_sampler("transformers", model, max_batch_rows=rows_per_batch)
    else:
        sampler = make_sampler("vllm", model)
    sampler.max_batch_requests = args.scenarios  # one batch for all first turns, like the bare call
    renderer = ChatRenderer(sampler.tokenizer)
    prompts = [renderer.prompt_ids(s.messages, s.tools) for s in scenarios]

    def bare() -> tuple[int, float]:
        if args.backend == "transformers":
            return bare_transformers(model, prompts, args.group_size, args.max_tokens)
        return bare_vllm(sampler._llm, prompts, args.group_size, args.max_tokens)  # type: ignore[attr-defined]

    def pipeline(run: str) -> tuple[int, float]:
        config = ReplayConfig(
            group_size=args.group_size,
            max_tokens=args.max_tokens,
            max_turns=1,
            concurrency=args.scenarios,
            flush_groups=args.scenarios,
            run=run,
        )
        started = time.perf_counter()
        result = replay(lake, "SELECT scenario_id FROM scenarios", sampler, config, progress=False)
        return result.generated_tokens, time.perf_counter() - started

    bare()  # warm-up: model load, kernels, allocator
    pipeline("warmup")
    bare_rates, pipe_rates = [], []
    for i in range(args.repeats):  # interleaved, so drift in a shared machine hits both alike
        tokens, seconds = bare()
        bare_rates.append(tokens / seconds)
        tokens, seconds = pipeline(f"bench-{i}")
        pipe_rates.append(tokens / seconds)
    bare_rate, pipe_rate = statistics.median(bare_rates), statistics.median(pipe_rates)

    table = Table(title=f"replay throughput ({args.backend}, {Path(model).name})")
    for column in (
        "scenarios",
        "G",
        "max tokens",
        "bare tok/s",
        "pipeline tok/s",
        "pipeline / bare",
        "target",
    ):
        table.add_column(column, justify="right")
    ratio = pipe_rate / bare_rate
    table.add_row(
        str(args.scenarios),
        str(args.group_size),
        str(args.max_tokens),
        f"{bare_rate:,.0f}",
        f"{pipe_rate:,.0f}",
        f"{ratio:.1%}",
        "[green]>= 90% ok[/green]" if ratio >= 0.9 else "[red]< 90%[/red]",
    )
    Console().print(table)
    Console().print(
        f"runs: bare {[round(r) for r in bare_rates]} tok/s, pipeline {[round(r) for r in pipe_rates]} tok/s; "
        f"pipeline includes rendering, micro-batching, parsing and Parquet writes of {args.scenarios} groups"
    )


if __name__ == "__main__":
    main()
