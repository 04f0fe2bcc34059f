"""The GPU run, prepared: trainers and sampler against stock TRL and bare `generate`, one process.

    bench/gpu.sh                     # on the GPU machine: installs the carried wheels, runs this
    python bench/gpu.py --tiny       # the same code on a CPU with a tiny shape (a test runs it)

Imports no lake library (the GPU machine has none of deltalake, DuckDB, Polars, Prefect):
only torch, transformers, PEFT, accelerate, TRL and trajlake's training maths. Prints three
tables and writes them, with the versions, to `--out`:

1. GRPO on agent-shaped groups (bench/grpo_agent.py): stock TRL, trajlake unpacked,
   trajlake tree-packed on SDPA's masked kernel, and on a GPU tree-packed on FlexAttention
   with a block mask; step and round-start pass tokens/s, peak memory, step MFU.
2. SFT on the same tokenised agent conversations: stock `SFTTrainer` with its defaults
   against `SFTTrainer` with trajlake's (`TrajlakeSFTConfig`: on a GPU bf16 and
   padding-free packing); tokens/s = TRL's `num_tokens` / `train_runtime`.
3. The transformers sampler (`training.replay.samplers.hf`, G = 8 per prompt, logprobs
   kept) against one bare `generate(num_return_sequences=8)` with transition scores.

The model: a Qwen2 of the 0.5B shape (hidden 896, 24 layers, 14 query / 2 KV heads, MLP
4864) with random weights and the vocabulary padded to Qwen2's 151,936 (the tiny
tokenizer's 1,024 tokens are the ids used), bf16 on a GPU. `--tiny`: 2 layers of width
64 and short prompts, fp32 on the CPU.

FLOPs for MFU: TRL's `compute_flops_per_token(config, seq_len)` (forward + backward = 3x
forward, 6N per token plus attention at the rows' mean length), times the tokens each
implementation forwards (the tree's nodes when packed), over the measured seconds and the
GPU's dense bf16 peak (989 TFLOP/s for the H100 and H200 SXM). LoRA computes no weight
gradients for the frozen weights, so 6N overstates its work by about 1.5x: read MFU as
"the dense-training equivalent".
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grpo_agent import GROUP_SIZE, agent_groups, batches, run, sync, table_rows, trainer_for  # noqa: E402

PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}  # dense, SXM


def versions() -> dict[str, str]:
    import accelerate
    import peft
    import torch
    import transformers
    import trl

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "peft": peft.__version__,
        "accelerate": accelerate.__version__,
        "gpu": gpu,
    }


def peak_flops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def markdown(title: str, rows: list[dict[str, str]]) -> str:
    columns = list(dict.fromkeys(c for r in rows for c in r))
    lines = [f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r.get(c, "") for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# --- SFT ---------------------------------------------------------------------------------------------


def sft_rows(count: int, max_len: int, vocab: int) -> list[dict[str, Any]]:
    """Tokenised agent conversations: a prompt, then completion tokens (the loss's) of varying length."""
    import random

    rng = random.Random(1)
    rows = []
    for _ in range(count):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randrange(max_len // 4, max_len // 2))]
        completion = [rng.randrange(3, vocab) for _ in range(rng.randrange(max_len // 8, max_len // 2))]
        rows.append(
            {"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)}
        )
    return rows


def step_clock() -> Any:
    """A Trainer callback that records the wall time at each step's end, so throughput can skip
    the first half (autotuning per shape); `second_half(history)` gives (tokens, seconds)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.at: dict[int, float] = {}

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            sync()
            self.at[state.global_step] = time.perf_counter()

        def second_half(self, history: list[dict[str, Any]]) -> tuple[float, float]:
            tokens = {h["step"]: h["num_tokens"] for h in history if "num_tokens" in h}
            last = max(tokens)
            return float(tokens[last]) - float(tokens[last // 2]), self.at[last] - self.at[last // 2]

    return StepClock()


def sft(model: Path, args: argparse.Namespace, work: Path) -> list[dict[str, str]]:
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from training.sft_config import TrajlakeSFTConfig

    cuda = torch.cuda.is_available()
    rows = sft_rows(args.sft_rows, args.sft_max_length, args.id_range)
    common = dict(
        max_steps=args.sft_steps,
        per_device_train_batch_size=8,
        learning_rate=1e-5,
        max_length=args.sft_max_length,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    device = {} if cuda else {"use_cpu": True}
    configs = {  # made after each reset: a config caches the accelerator state it was made under
        "stock TRL (its defaults)": lambda: SFTConfig(output_dir=str(work / "sft-stock"), **device, **common),
        "trajlake (its defaults)": lambda: TrajlakeSFTConfig(output_dir=str(work / "sft-ours"), **common),
    }
    lora = TrajlakeSFTConfig(output_dir=str(work / "sft-ours"), **common).lora_config()
    results = []
    for name, make in configs.items():
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)  # each config picks its own precision
        config = make()
        trainer = SFTTrainer(
            model=str(model),
            args=config,
            train_dataset=Dataset.from_list(rows),
            peft_config=lora,
        )
        clock = step_clock()
        trainer.add_callback(clock)
        trainer.train()
        tokens, seconds = clock.second_half(trainer.state.log_history)
        results.append(
            {
                "implementation": name,
                "precision": "bf16" if config.bf16 else "fp32",
                "packing": str(config.packing_strategy) if config.packing else "padded",
                "tokens/s": tokens / seconds,
            }
        )
        del trainer
        if cuda:
            torch.cuda.empty_cache()
    stock = results[0]["tokens/s"]
    return [
        {**r, "tokens/s": f"{r['tokens/s']:,.0f}", "vs stock": f"{r['tokens/s'] / stock:.2f}x"}
        for r in results
    ]


# --- the sampler -------------------------------------------------------------------------------------


def sampler(model: Path, args: argparse.Namespace) -> list[dict[str, str]]:
    import random

    import torch
    from transformers import AutoModelForCausalLM

    from training.replay.samplers.base import SampleRequest, SamplingParams
    from training.replay.samplers.hf import TransformersSampler

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    rng = random.Random(2)
    prompts = [
        [rng.randrange(3, args.id_range) for _ in range(args.sample_prompt_len)]
        for _ in range(args.sample_prompts)
    ]
    params = SamplingParams(max_tokens=args.sample_tokens, temperature=1.0, stop_token_ids=())

    ours = TransformersSampler(str(model), device=device, dtype="bfloat16" if cuda else "float32")
    requests = [SampleRequest(prompt_ids=tuple(p), n=GROUP_SIZE, params=params) for p in prompts]
    ours.generate(requests[:1])  # warm-up
    sync()
    started = time.perf_counter()
    completions = ours.generate(requests)
    sync()
    ours_s = time.perf_counter() - started
    ours_tokens = sum(len(c.token_ids) for group in completions for c in group)
    if cuda:  # where the sampler's time goes, for the note
        from torch.profiler import ProfilerActivity, profile

        short = [
            SampleRequest(prompt_ids=r.prompt_ids, n=GROUP_SIZE, params=params.with_max_tokens(16))
            for r in requests
        ]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            ours.generate(short)
            sync()
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25), flush=True)
    ours.close()

    bare = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device).eval()
    ids = torch.tensor(prompts, device=device)  # equal lengths: no padding either side

    def generate(batch: torch.Tensor) -> int:
        out = bare.generate(
            input_ids=batch,
            attention_mask=torch.ones_like(batch),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=args.sample_tokens,
            num_return_sequences=GROUP_SIZE,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=bare.generation_config.pad_token_id,
        )
        bare.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        return int(out.sequences[:, batch.size(1) :].numel())

    with torch.inference_mode():
        generate(ids[:1])
        sync()
        started = time.perf_counter()
        bare_tokens = generate(ids)
        sync()
        bare_s = time.perf_counter() - started
    rate_ours, rate_bare = ours_tokens / ours_s, bare_tokens / bare_s
    return [
        {
            "implementation": "bare generate",
            "tokens": f"{bare_tokens:,}",
            "tokens/s": f"{rate_bare:,.0f}",
            "vs bare": "1.00x",
        },
        {
            "implementation": "trajlake transformers sampler",
            "tokens": f"{ours_tokens:,}",
            "tokens/s": f"{rate_ours:,.0f}",
            "vs bare": f"{rate_ours / rate_bare:.2f}x",
        },
    ]


def profile_packed_step(args: argparse.Namespace, work: Path, tiny: Path) -> None:
    """Where a tree-packed step of one group spends its time (printed for the note)."""
    from torch.profiler import ProfilerActivity, profile

    rows = agent_groups(2, args.prompt_len, args.id_range, seed=0)
    trainer = trainer_for(work / "wide", rows, True, True, "sdpa", True, work)
    steps = batches(rows, trainer.processing_class.pad_token_id or 0, "cuda")
    for batch in steps:  # warm
        trainer.compute_loss(trainer.model, dict(batch)).backward()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        trainer.compute_loss(trainer.model, dict(steps[0])).backward()
        sync()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15), flush=True)


# --- main --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="A tiny shape on the CPU (the test's run).")
    parser.add_argument("--out", type=Path, help="Write the tables (markdown) and results (JSON) here.")
    parser.add_argument(
        "--only", choices=("all", "grpo"), default="all", help="grpo: leave SFT and the sampler out."
    )
    args = parser.parse_args(argv)
    tiny = args.tiny
    args.layers, args.vocab = (2, None) if tiny else (24, 151_936)
    args.width = (
        {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
        if tiny
        else None
    )
    args.groups, args.prompt_len = (4, 96) if tiny else (8, 1500)
    args.sft_rows, args.sft_steps, args.sft_max_length = (32, 4, 256) if tiny else (320, 24, 4096)
    args.sample_prompts, args.sample_prompt_len, args.sample_tokens = (2, 32, 16) if tiny else (8, 1500, 128)

    import torch
    from transformers import AutoConfig
    from trl.trainer.utils import compute_flops_per_token

    from training.tiny import build_tiny_model

    info = versions()
    print(json.dumps(info), flush=True)
    work = Path(tempfile.mkdtemp(prefix="trajlake-gpu-"))
    tiny_model = build_tiny_model(work / "tiny")
    started = time.perf_counter()
    grpo = run(args, work, tiny_model, flex=torch.cuda.is_available())
    # the same groups, four per step: on a GPU a one-group step of a small model is launch-bound
    grpo_wide = run(args, work, tiny_model, groups_per_step=4) if args.groups >= 4 else []
    print(f"grpo done in {time.perf_counter() - started:.0f} s", flush=True)
    config = AutoConfig.from_pretrained(work / "wide")
    args.id_range = min(config.vocab_size, 1024)  # token ids the tiny tokenizer has (as in the GRPO rows)
    measured = [r for r in grpo if "step_tokens" in r]
    mean_len = sum(r["step_tokens"] for r in measured) / max(1, sum(r["step_rows"] for r in measured))
    flops = compute_flops_per_token(config, int(mean_len))
    grpo_cells = table_rows(grpo, flops, peak_flops())
    grpo_wide_cells = table_rows(grpo_wide, flops, peak_flops()) if grpo_wide else []
    if torch.cuda.is_available():
        profile_packed_step(args, work, tiny_model)
    sft_cells, sampler_cells = [], []
    if args.only == "all":
        sft_cells = sft(work / "wide", args, work)
        print(f"sft done in {time.perf_counter() - started:.0f} s", flush=True)
        sampler_cells = sampler(work / "wide", args)
        print(f"sampler done in {time.perf_counter() - started:.0f} s", flush=True)

    shape = (
        f"Qwen2 {config.hidden_size} wide x {config.num_hidden_layers} layers, vocab {config.vocab_size:,}"
    )
    device = info["gpu"] if torch.cuda.is_available() else f"CPU ({torch.get_num_threads()} threads)"
    report = "\n".join(
        [
            f"## trajlake on {device}: {shape}",
            "",
            "versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
            "",
            markdown(
                f"GRPO, agent-shaped groups ({args.groups} groups x G={GROUP_SIZE}, prompts ~{args.prompt_len} "
                f"tokens, mean row {mean_len:,.0f} tokens; warm-up: "
                + (
                    "a whole untimed pass over the groups first)"
                    if torch.cuda.is_available()
                    else "the first group)"
                ),
                grpo_cells,
            ),
            markdown(f"GRPO, the same groups, 4 per step ({4 * GROUP_SIZE} rows)", grpo_wide_cells)
            if grpo_wide_cells
            else "",
            markdown(
                f"SFT ({args.sft_steps} steps x 8 rows, up to {args.sft_max_length} tokens; the second half timed)",
                sft_cells,
            )
            if sft_cells
            else "",
            markdown(
                f"Sampler ({args.sample_prompts} prompts of {args.sample_prompt_len} tokens x G={GROUP_SIZE}, "
                f"{args.sample_tokens} new tokens each)",
                sampler_cells,
            )
            if sampler_cells
            else "",
        ]
    )
    print(report, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_table.md").write_text(report)
        (args.out / "gpu_results.json").write_text(
            json.dumps({"versions": info, "grpo": grpo, "grpo_4_groups_per_step": grpo_wide}, indent=1)
        )
    return report


if __name__ == "__main__":
    main()
