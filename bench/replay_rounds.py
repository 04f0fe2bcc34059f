"""Replay rounds shaped like the demo's, with the shared-prefix decode and the former `generate` path.

    python bench/replay.py [--model smollm2-135m-instruct] [--scenarios 24] [--group-size 16]
        [--max-tokens 48] [--max-turns 3] [--repeats 2] [--no-shared-prefix] [--with-adapter]
        [--dtype bfloat16] [--split-packing]

Each run is `training.replay.replay` end to end on the demo's agent: its system prompts (three,
each question under the one the demo's production agent ran it with) and `calculator` tool
definition, its mixed questions (`flows.demo.task`), T=0.8, up to 3 turns
with the real calculator answering, every group written to the lake. The transformers sampler
runs twice per repeat (interleaved, so the load hits both alike), once with the shared-prefix
decode (`training/replay/samplers/shared_prefix.py`) and once with the former path
(`shared_prefix=False`: `generate` over left-padded rows, 64 at a time, its default then, each
prompt prefilled once for its `n` rows, each token drawn by exponential races as then:
`former_draws`); the model load and a two-scenario warm-up of each are excluded. A fresh seed per repeat
keeps a repeat from replaying the groups the last one wrote.

`--with-adapter` samples through a LoRA adapter in the trainer's default shape (rank 16 on
every attention and MLP projection), as the demo's GRPO rounds and evaluations do. Its `B` is
PEFT's initial zero, so every path samples the base model's tokens and only the adapter's cost
differs: the former path runs PEFT's forward (base and adapter matmuls apart), the
shared-prefix path merges the adapter into copies of the weights
(`training/replay/samplers/merged.py`), and a third run, `shared prefix, PEFT forward`, splits
the gain between the two.

`--split-packing` adds a run of the shared-prefix path on `F.linear` (`pack_weights=False`):
what packing the float32 weights for MKL once (`training/replay/samplers/packed.py`) adds.

`--dtype bfloat16` runs the shared-prefix paths in bfloat16 (`sampler.dtype`; an adapter is
then stacked under the weights, not merged into them) against the former path in float32, as
it ran; the JSON adds the `torch.mm` bfloat16 peak.

The last line printed is one JSON object: `tokens_per_s` (generated tokens / wall seconds, the
median run), `flop_share` (forward tokens computed, prefill + decode, padding excluded, x 2 x
parameters / wall seconds / the `torch.mm` fp32 peak of this process, `bench/flops.py`), the
same for the former path under `before`, `speedup` (the ratio of the medians) and
`speedup_runs` (each repeat's own ratio: a repeat runs both paths back to back, so its ratio
is paired by the load it saw, and their spread shows how far one run of the bench can be trusted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.flops import TokenCounter, matmul_peak, parameters
from store.lake import Lake
from training.models.known import resolve_model
from training.replay.rollout.loop import RolloutLimits
from training.replay.rollout.tools import make_tools
from training.replay.samplers import SamplingParams, make_sampler
from training.replay.samplers.seeded import SeededSampling
from training.replay.scenario_io import load_scenarios
from training.replay.stage import ReplayConfig, replay
from training.tiny import TOOLS, tiny_model_path


def _scenarios(path: Path, count: int) -> Path:
    from flows.demo.task import make_questions, system_prompt

    lines = [
        {
            "messages": [
                {"role": "system", "content": system_prompt(q, "mixed")},  # the demo's three, by question
                {"role": "user", "content": q.text},
            ],
            "tools": TOOLS,
            "expected": json.dumps(q.answer),
        }
        for q in make_questions(count, seed=7, task="mixed")
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


def _zero_adapter(model: str, folder: Path) -> str:
    """A LoRA adapter in the trainer's default shape with PEFT's initial weights (B = 0)."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from training.lora import LoraFields

    get_peft_model(AutoModelForCausalLM.from_pretrained(model), LoraFields().lora_config()).save_pretrained(
        folder
    )
    return str(folder)


@contextlib.contextmanager
def former_draws() -> Iterator[None]:
    """Tokens drawn as the former path drew them (until 2026-11-29): exponential races,
    `argmax(log p - log E)` with one Exp(1) draw per token from the row's generator, the rows'
    draws split across torch's threads. Kept here so the before/after ratio is of one run."""
    import torch

    pool = ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads() - 1))

    def choose(
        self: SeededSampling,
        input_ids: Any,
        scores: Any,
        rows: Sequence[int] | None = None,
        idle: Collection[int] = (),
    ) -> tuple[Any, Any]:
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        logp = torch.log_softmax(scores.float(), dim=-1)
        if all(self.greedy_rows):  # the bench samples every row at one temperature
            picked = logp.argmax(dim=-1)
        else:
            names = range(len(self.generators)) if rows is None else rows
            draws = [(i, self.generators[r]) for i, r in enumerate(names) if r not in idle]
            noise = torch.ones_like(logp)

            def fill(part: Sequence[tuple[int, Any]]) -> None:
                with torch.inference_mode(noise.is_inference()):
                    for i, generator in part:
                        noise[i].exponential_(generator=generator)

            workers = max(1, min(torch.get_num_threads(), len(draws)))
            parts = [draws[k::workers] for k in range(workers)]
            futures = [pool.submit(fill, part) for part in parts[1:]]
            fill(parts[0])
            for future in futures:
                future.result()
            races = torch.sub(logp, noise.clamp_min_(torch.finfo(noise.dtype).tiny).log_(), out=noise)
            picked = races.argmax(dim=-1)
        return picked, logp.gather(-1, picked[:, None])[:, 0]

    current = SeededSampling.choose
    SeededSampling.choose = choose  # type: ignore[method-assign]
    try:
        yield
    finally:
        SeededSampling.choose = current  # type: ignore[method-assign]
        pool.shutdown()


def rounds(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="bench/replay.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="Model (default: the tiny model).")
    parser.add_argument("--scenarios", type=int, default=24, help="Scenarios per round (the demo's 24).")
    parser.add_argument(
        "--group-size", type=int, default=16, help="Rollouts per scenario (G; the demo's 16)."
    )
    parser.add_argument("--max-tokens", type=int, default=48, help="Tokens per turn (the demo's 48).")
    parser.add_argument("--max-turns", type=int, default=3, help="Turns per rollout (the demo's 3).")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument(
        "--max-batch-rows",
        type=int,
        default=512,
        help="Rows per batch, shared-prefix path (the sampler's default).",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16"],
        help="Precision of the shared-prefix paths (default: the sampler's, float32 on a CPU).",
    )
    parser.add_argument("--repeats", type=int, default=1, help="Runs of each path; the median is reported.")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch threads (0: torch's default).")
    parser.add_argument(
        "--no-shared-prefix", action="store_true", help="Measure only the former path (`generate`)."
    )
    parser.add_argument(
        "--split-packing",
        action="store_true",
        help="Also run the shared-prefix path on `F.linear` (weights not packed for MKL).",
    )
    parser.add_argument(
        "--with-adapter",
        action="store_true",
        help="Sample through a rank-16 LoRA adapter on every projection (zero B: the base model's tokens).",
    )
    args = parser.parse_args(argv)
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    model = resolve_model(args.model) if args.model else str(tiny_model_path())
    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-rounds-"))
    lake = Lake(str(work / "lake"))
    load_scenarios(lake, _scenarios(work / "scenarios.jsonl", args.scenarios))
    paths = (
        {"former (generate)": False}
        if args.no_shared_prefix
        else {"shared prefix": True, "former (generate)": False}
    )
    adapter = _zero_adapter(model, work / "adapter") if args.with_adapter else None
    if adapter and not args.no_shared_prefix:
        paths["shared prefix, PEFT forward"] = True
    if args.split_packing and not args.no_shared_prefix:
        paths["shared prefix, F.linear"] = True
    # The former path as it ran before: 64 rows per `generate` call, its default then, and
    # PEFT's own forward through an adapter.
    samplers = {
        name: make_sampler(
            "transformers",
            model,
            adapter=adapter,
            max_batch_rows=args.max_batch_rows if shared else 64,
            shared_prefix=shared,
            merge_adapters=name in ("shared prefix", "shared prefix, F.linear"),
            pack_weights=name != "shared prefix, F.linear",
            **({"dtype": args.dtype} if shared and args.dtype else {}),
        )
        for name, shared in paths.items()
    }
    tools = make_tools(["flows.demo.task:calculator"], recorded=False)
    peak_before = matmul_peak()

    def run(name: str, seed: int, selection: str = "SELECT scenario_id FROM scenarios") -> dict[str, Any]:
        sampler = samplers[name]
        sampler.max_batch_requests = args.scenarios * args.group_size  # a round's rollouts in one batch
        config = ReplayConfig(
            group_size=args.group_size,
            sampling=SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=seed),
            limits=RolloutLimits(max_turns=args.max_turns),
            concurrency=args.scenarios,
            flush_groups=args.scenarios,
            run=f"bench-{name}-{seed}",  # each path writes its own groups
        )
        counter = TokenCounter(sampler._load().model)  # type: ignore[attr-defined]  # the decoder stack
        draws = contextlib.nullcontext() if paths[name] else former_draws()
        try:
            with draws:
                started = time.perf_counter()
                result = replay(lake, selection, sampler, config, tools=tools, progress=False)
                seconds = time.perf_counter() - started
        finally:
            counter.close()
        if result.failed:
            raise SystemExit(f"replay failed: {result.failed[:2]}")
        return {
            "seconds": seconds,
            "generated": result.generated_tokens,
            "forward_tokens": counter.real,
            "forward_tokens_padded": counter.padded,
        }

    for name in samplers:
        run(name, 1000, "SELECT scenario_id FROM scenarios LIMIT 2")  # warm-up: load, kernels, allocator
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in samplers}
    for i in range(args.repeats):
        for name in samplers:
            runs[name].append(run(name, i))
    peak = max(peak_before, matmul_peak())
    # The base model's: the shared-prefix path forwards an adapter merged into its weights. (The
    # former path's PEFT forward does ~4% more work than this counts for a rank-16 adapter.)
    params = parameters(next(iter(samplers.values()))._load(), lora=False)  # type: ignore[attr-defined]

    def summary(name: str) -> dict[str, Any]:
        rs = runs[name]
        rate = statistics.median(r["generated"] / r["seconds"] for r in rs)
        share = statistics.median(r["forward_tokens"] * 2 * params / r["seconds"] / peak for r in rs)
        return {
            "tokens_per_s": round(rate, 1),
            "flop_share": round(share, 3),
            "forward_tokens_per_generated": round(
                sum(r["forward_tokens"] for r in rs) / sum(r["generated"] for r in rs), 2
            ),
            "padding_share": round(
                1 - sum(r["forward_tokens"] for r in rs) / sum(r["forward_tokens_padded"] for r in rs), 3
            ),
            "runs_tokens_per_s": [round(r["generated"] / r["seconds"], 1) for r in rs],
        }

    out: dict[str, Any] = {
        "model": Path(model).name,
        "adapter": "rank-16 LoRA, every projection" if adapter else None,
        "workload": f"{args.scenarios} scenarios x G={args.group_size}, <= {args.max_turns} turns x "
        f"{args.max_tokens} tokens, T={args.temperature}",
        "threads": torch.get_num_threads(),
        "parameters": params,
        "mm_peak_gflops": round(peak / 1e9, 1),
    }
    if args.dtype == "bfloat16":
        out["dtype"] = "bfloat16"
        out["mm_peak_bf16_gflops"] = round(matmul_peak(dtype=torch.bfloat16) / 1e9, 1)
    for name in samplers:
        print(f"{name}: {json.dumps(summary(name))}")
    if args.no_shared_prefix:
        out.update(summary("former (generate)"))
    else:
        out.update(summary("shared prefix"))
        out["before"] = summary("former (generate)")
        out["speedup"] = round(out["tokens_per_s"] / out["before"]["tokens_per_s"], 2)
        # A repeat runs both paths back to back, so each repeat's ratio is paired by the load it saw.
        out["speedup_runs"] = [
            round(shared / former, 2)
            for shared, former in zip(
                out["runs_tokens_per_s"], out["before"]["runs_tokens_per_s"], strict=True
            )
        ]
    print(json.dumps(out))
