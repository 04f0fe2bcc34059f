"""Benchmark the training stages against stock TRL on the same model and data.

    python bench/train.py [--model PATH] [--steps 30] [--repeats 2] [--activation-checkpointing on|off]
    python bench/train.py --workload agent [--layers 2] [--groups 3]   (bench/grpo_agent.py)

What it measures (printed as a rich table, one row per implementation and settings):

1. SFT: `training.sft.train_sft` (lake selection, trajlake tokenisation with assistant
   masks, TRL `SFTTrainer` + LoRA, runs-table callback) with its defaults for this
   device, against stock `SFTTrainer` given the same conversations as a conversational
   dataset (`assistant_only_loss=True`), same LoRA, batch size and steps: stock with its
   own defaults here (on a CPU: `use_cpu`, which makes TRL pick bf16 autocast, no
   packing), stock in fp32 with bfd packing, and stock with trajlake's settings. Tokens/s
   = tokens trained on / train runtime (TRL's own `num_tokens`, which counts real tokens
   with or without padding, and `train_runtime`, so every row counts alike). Bin fill:
   real tokens / (packed rows x max_length) for packed rows.
2. GRPO: `training.grpo.train_grpo` on stored scored groups (its defaults: all-equal
   groups skipped, the sampler/trainer gap logged every step; with truncated importance
   sampling turned on, its round-start forward pass would be added to its seconds)
   against stock `GRPOTrainer` fed the same groups through TRL's `rollout_func` (its
   supported hook for externally generated completions) and a reward function returning
   the stored rewards: same LoRA, loss, batch size and steps; stock with its own defaults
   here and in fp32.

The defaults trajlake picks per device (`training.device`) come from these numbers: on a
CPU fp32, on a GPU bf16; padded batches on both (bench/gpu.py measured bfd packing on SDPA slower on an H200). Each row runs
`--repeats` times, interleaved, and the best run counts (the CPU is shared); below the
table, trajlake's defaults against the best stock row as a median of per-run ratios with a
bootstrap interval. The model defaults to the tiny offline model; pass a 0.5B-class
model folder on a GPU machine for meaningful absolute numbers.

The last line is one JSON object: per stage, trajlake's defaults' tokens/s (trained, and
computed: a tree-packed batch forwards its tree's nodes), seconds a step, whether activations
were recomputed, and `flop_share` (6 x parameters x tokens computed / seconds / the
`torch.mm` fp32 peak). trajlake's rows run with its default `activation_checkpointing` for
this device unless `--activation-checkpointing` sets it; stock TRL's rows keep it off.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.flops import parameters  # noqa: E402
from bench.grpo_agent import main as agent_workload  # noqa: E402
from bench.train_stock import grpo_stock, sft_stock  # noqa: E402
from bench.train_workload import (  # noqa: E402
    TOOLS,
    conversation,
    cuda,
    grpo_kwargs,
    grpo_lake,
    make_groups,
    ours_checkpointing,
    sft_kwargs,
)
from store.catalog.connection import connect  # noqa: E402
from store.lake import Lake  # noqa: E402
from store.metrics import TREE_PACKING_SAVED_SHARE, row_metrics  # noqa: E402
from store.rows import utc_now  # noqa: E402
from store.vocabulary import equals  # noqa: E402
from store.writer import write  # noqa: E402
from training.tiny import tiny_model_path  # noqa: E402

# --- SFT -------------------------------------------------------------------------------------------


def step_metrics(lake: Lake, run_id: str) -> list[dict[str, Any]]:
    """The metrics each step of the run logged (`runs.scalars` and `tags`), in step order."""
    with connect(lake) as con:
        rows = con.execute(
            "SELECT scalars, tags FROM runs WHERE run_id = ? ORDER BY step", [run_id]
        ).fetchall()
    return [row_metrics(scalars, tags) for scalars, tags in rows]


def computed_tokens(steps: list[dict[str, Any]]) -> tuple[float, float]:
    """Tokens trained on (TRL's cumulative `num_tokens`) and tokens the forward computed: each
    step's new tokens less the share tree packing did not forward in that step."""
    seen = computed = 0.0
    for metrics in steps:
        new = metrics["num_tokens"] - seen
        seen = metrics["num_tokens"]
        computed += new * (1 - metrics.get(TREE_PACKING_SAVED_SHARE, 0.0))
    return seen, computed


def checkpointing_on(config: Any) -> bool:
    """Whether the trainer recomputes activations (either name of the setting)."""
    return bool(config.activation_checkpointing or config.gradient_checkpointing)


def sft_ours(model: str, lake: Lake, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """`train_sft` with trajlake's defaults for this device."""
    from training.sft import train_sft
    from training.sft_config import TrajlakeSFTConfig

    config = TrajlakeSFTConfig(output_dir=str(out), **ours_checkpointing(sft_kwargs(args), args))
    result = train_sft(
        lake,
        f"SELECT trajectory_id FROM trajectories WHERE {equals('source', 'otel', table='trajectories')}",
        model,
        out,
        config,
    )
    tokens, computed = computed_tokens(step_metrics(lake, result.run_id))
    fill = result.report["packing_bin_fill"]
    return {
        "tokens": tokens,
        "computed": computed,
        "checkpointing": checkpointing_on(config),
        "seconds": result.metrics["train_runtime"],
        "packing": fill if fill is not None else float("nan"),
        "bf16": bool(config.bf16),
        "packed": bool(config.packing),
    }


# --- GRPO ------------------------------------------------------------------------------------------


def grpo_ours(
    model: str, lake: Lake, args: argparse.Namespace, out: Path, settings: dict[str, Any]
) -> dict[str, float]:
    """`train_grpo`; `settings` overrides (empty: its defaults, sampler correction included)."""
    from training.grpo import train_grpo
    from training.grpo_config import TrajlakeGRPOConfig

    config = TrajlakeGRPOConfig(
        output_dir=str(out), **{**ours_checkpointing(grpo_kwargs(args), args), **settings}
    )
    result = train_grpo(
        lake,
        f"SELECT trajectory_id FROM trajectories WHERE {equals('source', 'replay', table='trajectories')}",
        model,
        None,
        out,
        config,
    )
    tokens, computed = computed_tokens(step_metrics(lake, result.run_id))
    return {
        "tokens": tokens,
        "computed": computed,
        "checkpointing": checkpointing_on(config),
        # the round-start forward pass (sampler/trainer gap) runs before TRL's clock starts
        "seconds": result.metrics["train_runtime"] + result.report.get("round_start_logprobs_s", 0.0),
        "packing": float("nan"),
        "bf16": bool(config.bf16),
        "packed": False,
    }


# --- main ----------------------------------------------------------------------------------------------


def rate(run: dict[str, float]) -> float:
    return run["tokens"] / run["seconds"]


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=rate)


def paired_summary(stage: str, results: dict[tuple[str, str, str], list[dict[str, float]]]) -> str:
    """trajlake's defaults against the best stock row, run by run: the rows of one repeat ran
    back to back, so their ratio cancels the load the machine had then; the median ratio with
    a 95% bootstrap interval over the repeats."""
    import numpy as np

    ours = results[(stage, "trajlake", "its defaults")]
    stock_key = max(
        (k for k in results if k[0] == stage and k[1] == "stock TRL"), key=lambda k: rate(best(results[k]))
    )
    ratios = np.array([rate(a) / rate(b) for a, b in zip(ours, results[stock_key], strict=True)])
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(ratios, size=(10_000, len(ratios))), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return (
        f"{stage}: trajlake / stock TRL ({stock_key[2]}), paired by run: median {np.median(ratios):.3f} "
        f"[{low:.3f}, {high:.3f}] (95% bootstrap CI over {len(ratios)} runs)"
    )


def flop_shares(
    model: str, results: dict[tuple[str, str, str], list[dict[str, float]]], peak: float, steps: int
) -> dict[str, Any]:
    """Per stage, trajlake's defaults: tokens/s and the share of the `torch.mm` fp32 peak its
    forward + backward used (6 x parameters x tokens computed: a tree-packed batch, SFT's or
    GRPO's, computes its tree's nodes, not every row's tokens)."""
    from transformers import AutoModelForCausalLM

    params = parameters(AutoModelForCausalLM.from_pretrained(model))
    out: dict[str, Any] = {
        "model": Path(model).name,
        "parameters": params,
        "mm_peak_gflops": round(peak / 1e9, 1),
    }
    for (stage, impl, settings), runs in results.items():
        if impl != "trajlake" or settings != "its defaults":
            continue
        run = best(runs)
        computed = run["computed"]
        out[stage] = {
            "activation_checkpointing": run["checkpointing"],
            "tokens_per_s": round(rate(run), 1),
            "computed_per_s": round(computed / run["seconds"], 1),
            "step_s": round(run["seconds"] / steps, 2),
            "flop_share": round(6 * params * computed / run["seconds"] / peak, 3),
        }
    return out


def same_as_ours() -> dict[str, Any]:
    """trajlake's SFT defaults on this device, for stock TRL (the apples-to-apples row)."""
    from training.sft_config import TrajlakeSFTConfig

    ours = TrajlakeSFTConfig(output_dir="unused")
    return {"bf16": bool(ours.bf16), "packing": bool(ours.packing)}


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="Model folder (default: the tiny offline model).")
    parser.add_argument("--steps", type=int, default=30, help="Optimizer steps per run.")
    parser.add_argument("--repeats", type=int, default=2, help="Runs per side (best counts).")
    parser.add_argument("--batch-size", type=int, default=8, help="Rows per step.")
    parser.add_argument("--conversations", type=int, default=400, help="SFT conversations.")
    parser.add_argument("--max-length", type=int, default=1024, help="SFT packed row length.")
    parser.add_argument("--groups", type=int, default=64, help="GRPO groups.")
    parser.add_argument("--group-size", type=int, default=4, help="Trajectories per group.")
    parser.add_argument("--prompt-len", type=int, default=128, help="Max prompt tokens (GRPO).")
    parser.add_argument("--completion-len", type=int, default=128, help="Max completion tokens (GRPO).")
    parser.add_argument("--stages", default="sft,grpo", help="Stages to run (comma-separated).")
    parser.add_argument("--ours-only", action="store_true", help="Skip the stock TRL rows.")
    parser.add_argument(
        "--activation-checkpointing",
        choices=("default", "on", "off"),
        default="default",
        help="trajlake's rows: recompute activations or not (default: trajlake's default here); "
        "stock TRL's rows keep it off.",
    )
    parser.add_argument(
        "--workload",
        choices=("short", "agent"),
        default="short",
        help="short: the stages above; agent: bench/grpo_agent.py (its options follow).",
    )
    args, rest = parser.parse_known_args()
    if args.workload == "agent":
        agent_workload(rest)
        return

    import logging

    import transformers

    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    from transformers import AutoTokenizer

    console = Console(width=160)
    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-train-"))
    try:
        from bench.flops import matmul_peak
        from training.models.known import resolve_model

        model = resolve_model(args.model) if args.model else str(tiny_model_path(work / "models"))
        peak = matmul_peak()
        vocab = len(AutoTokenizer.from_pretrained(model))
        rng = random.Random(0)
        convs = [conversation(i, rng) for i in range(args.conversations)]
        lake = Lake(str(work / "lake"))
        now = utc_now()
        write(
            lake,
            "trajectories",
            [
                {
                    "trajectory_id": f"c{i:05d}",
                    "source": "otel",
                    "started_at": now,
                    "messages": c,
                    "tools": json.dumps(TOOLS),
                }
                for i, c in enumerate(convs)
            ],
        )
        groups = make_groups(args, vocab, rng)
        grpo_lake(lake, groups)

        fp32 = {"bf16": False}
        runs = [
            ("sft", "stock TRL", "its defaults", lambda o: sft_stock(model, convs, args, o, {})),
            (
                "sft",
                "stock TRL",
                "fp32, bfd packing",
                lambda o: sft_stock(model, convs, args, o, {**fp32, "packing": True}),
            ),
            (
                "sft",
                "stock TRL",
                "trajlake's settings",
                lambda o: sft_stock(model, convs, args, o, same_as_ours()),
            ),
            ("sft", "trajlake", "its defaults", lambda o: sft_ours(model, lake, args, o)),
            ("grpo", "stock TRL", "its defaults", lambda o: grpo_stock(model, groups, args, o, {})),
            ("grpo", "stock TRL", "fp32", lambda o: grpo_stock(model, groups, args, o, fp32)),
            ("grpo", "trajlake", "its defaults", lambda o: grpo_ours(model, lake, args, o, {})),
            (
                "grpo",
                "trajlake",
                "tree packing off",
                lambda o: grpo_ours(model, lake, args, o, {"tree_packing": False}),
            ),
        ]
        if args.ours_only:
            runs = [r for r in runs if r[1] == "trajlake" and r[2] == "its defaults"]
        if cuda():  # stock's defaults are trajlake's settings there
            runs = [r for r in runs if r[2] != "fp32, bfd packing"]
        results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
        for r in range(args.repeats):
            for i, (stage, impl, settings, fn) in enumerate(runs):
                if stage not in args.stages.split(","):
                    continue
                console.log(f"{stage} / {impl} / {settings} (run {r + 1}/{args.repeats})")
                results.setdefault((stage, impl, settings), []).append(fn(work / f"{stage}-{i}-{r}"))

        table = Table(
            title=f"training throughput, {args.steps} steps x batch {args.batch_size}, model {Path(model).name}, "
            f"{'CUDA' if cuda() else f'CPU, {torch_threads()} threads'}"
        )
        for col in (
            "stage",
            "implementation",
            "settings",
            "precision",
            "packing",
            "tokens",
            "seconds",
            "tokens/s",
            "vs best stock",
            "bin fill",
        ):
            table.add_column(
                col,
                justify="left"
                if col in ("stage", "implementation", "settings", "precision", "packing")
                else "right",
            )
        for stage in [s for s in ("sft", "grpo") if s in args.stages.split(",")]:
            keys = [k for k in results if k[0] == stage]
            best_stock = max(
                (rate(best(results[k])) for k in keys if k[1] == "stock TRL"), default=float("nan")
            )
            for key in keys:
                run = best(results[key])
                fill = "-" if run["packing"] != run["packing"] else f"{run['packing']:.1%}"
                table.add_row(
                    stage,
                    key[1],
                    key[2],
                    "bf16" if run["bf16"] else "fp32",
                    "bfd" if run["packed"] else "padded",
                    f"{run['tokens']:,.0f}",
                    f"{run['seconds']:.2f}",
                    f"{rate(run):,.0f}",
                    f"{rate(run) / best_stock:.1%}",
                    fill,
                )
        console.print(table)
        for stage in [s for s in ("sft", "grpo") if s in args.stages.split(",")]:
            if not args.ours_only:
                console.print(paired_summary(stage, results))
        print(json.dumps(flop_shares(model, results, max(peak, matmul_peak()), args.steps)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
