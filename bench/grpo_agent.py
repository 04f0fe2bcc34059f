"""GRPO steps on agent-shaped groups: stock TRL, trajlake unpacked, trajlake tree-packed.

    python bench/train.py --workload agent [--layers 2] [--groups 3]    (or bench/grpo_agent.py; on a CPU)
    bench/gpu.sh                                                        (on a GPU, with SFT and the sampler)

The workload has the shape of the lake's agent groups: per group one prompt of about
`--prompt-len` tokens (system prompt, tool definitions, a few turns of history), G = 8
samples, each a completion of 100-300 tokens with one or two tool turns (assistant turn,
tool result masked out of the loss, assistant turn...). Agents at a temperature often make
the same first call: half of each group's samples share their first assistant turn and its
tool result token for token, the rest start their own way.

The model is a Qwen2 with the width of a 0.5B-class model (hidden 896, MLP 4864, 14 query /
2 key-value heads) and random weights; on a CPU only `--layers` of its 24 layers, so a run
stays within minutes (every layer costs the same, so the ratios hold). Vocabulary: the tiny
tokenizer's 1,024 tokens, or `--vocab` (151,936 is Qwen2's) for a real LM head's cost.
`--model smollm2-135m-instruct` (or any model folder) measures a real model whole instead: its
30 layers, tied embeddings and 49,152-token LM head (token ids drawn from its first 1,024).

Every implementation gets the same tensors (the batch `StoredGroupsGRPOTrainer` builds from
one group's rows) through stock `GRPOTrainer.compute_loss` (every row forwarded whole) and
trajlake's with `tree_packing` off and on. A step: loss + backward + AdamW on the LoRA
weights; the round-start pass: the no-grad logprob pass over every row (`ROUND_START_BATCH_FACTOR`
x the batch size per forward). A group is a step, the first a warm-up. Tokens: the rows' real
tokens (prompt + completion), the same for every row, so tokens/s compare work done for the user. Peak memory: the GPU's peak allocation (on a
CPU: the peak resident set above the start).
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peak_memory import PeakMemory

QWEN2_05B_WIDTH = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": True,
}
GROUP_SIZE = 8


def agent_groups(groups: int, prompt_len: int, vocab: int, seed: int = 0) -> list[dict[str, Any]]:
    """Stored GRPO rows (the columns `StoredGroupsGRPOTrainer` reads) of agent-shaped groups."""
    rng = random.Random(seed)

    def tokens(low: int, high: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(rng.randrange(low, high + 1))]

    rows = []
    for g in range(groups):
        prompt = tokens(int(prompt_len * 0.9), int(prompt_len * 1.1))
        shared_call, shared_result = tokens(30, 60), tokens(20, 50)
        for k in range(GROUP_SIZE):
            completion: list[int] = []
            mask: list[int] = []
            tool_turns = 1 + k % 2
            for turn in range(tool_turns):
                call, result = (
                    (shared_call, shared_result)
                    if turn == 0 and k < GROUP_SIZE // 2
                    else (tokens(30, 60), tokens(20, 50))
                )
                completion += call + result
                mask += [1] * len(call) + [0] * len(result)
            final = tokens(20, max(21, 300 - len(completion)))
            completion += final
            mask += [1] * len(final)
            rows.append(
                {
                    "group_id": f"g{g}",
                    "prompt_ids": prompt,
                    "completion_ids": completion,
                    "tool_mask": mask,
                    "logprobs": [rng.uniform(-8.0, -4.0) if m else 0.0 for m in mask],
                    "advantage": (k % 4 - 1.5) / 1.2,
                    "reward": float(k % 4) / 3,
                    "truncated": False,
                }
            )
    return rows


def wide_model(
    folder: Path, layers: int, vocab: int | None, tokenizer_from: Path, width: dict[str, Any] | None = None
) -> Path:
    """A random-weight Qwen2 of the 0.5B-class width (or `width`) with the tiny model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = Qwen2Config(
        vocab_size=vocab or len(tokenizer),
        num_hidden_layers=layers,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **{**QWEN2_05B_WIDTH, **(width or {})},
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    # saved in the precision the trainers load (bf16 on a GPU): half the bytes to read back each time
    model.to(torch.bfloat16 if torch.cuda.is_available() else torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


IMPLEMENTATIONS = (  # name, trajlake's trainer?, tree packing, attention implementation
    ("stock TRL", False, False, "sdpa"),
    ("trajlake, unpacked", True, False, "sdpa"),
    ("trajlake, tree-packed", True, True, "sdpa"),
)
FLEX = ("trajlake, tree-packed, FlexAttention", True, True, "flex_attention")


def trainer_for(
    model: Path,
    rows: list[dict[str, Any]],
    ours: bool,
    packing: bool,
    attention: str,
    bf16: bool,
    out: Path,
    groups_per_step: int = 1,
) -> Any:
    """Stock `GRPOTrainer` or trajlake's on the rows, the same LoRA initialisation (seeded)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from training.grpo_config import TrajlakeGRPOConfig
    from training.grpo_trainer import stored_reward
    from training.grpo_tree_trainer import grpo_trainer_class

    config = TrajlakeGRPOConfig(
        output_dir=str(out / "ckpt"),
        per_device_train_batch_size=GROUP_SIZE * groups_per_step,
        max_steps=1,
        activation_checkpointing=False,
        save_strategy="no",
        bf16=bf16,
        beta=0.0,
        tree_packing=packing,
        measure_sampler_gap=False,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        max_completion_length=None,
        mask_truncated_completions=False,
        model_init_kwargs={"attn_implementation": attention, "dtype": "bfloat16" if bf16 else "float32"},
    )
    trainer = (grpo_trainer_class(config) if ours else GRPOTrainer)(
        model=str(model),
        reward_funcs=stored_reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        peft_config=config.lora_config(),
    )
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def batches(
    rows: list[dict[str, Any]], pad_id: int, device: str, groups_per_step: int = 1
) -> list[dict[str, Any]]:
    """One training batch per `groups_per_step` groups, built once: the tensors
    `StoredGroupsGRPOTrainer` builds from stored rows (`pad_rows`), fed unchanged to every
    implementation."""
    from training.grpo_batch import pad_rows

    by_group: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_group.setdefault(row["group_id"], []).append(row)
    groups = list(by_group.values())
    built = []
    for start in range(0, len(groups) - groups_per_step + 1, groups_per_step):
        chunk = [row for group in groups[start : start + groups_per_step] for row in group]
        batch = {k: v.to(device) for k, v in pad_rows(chunk, pad_id, None, False).items()}
        batch["num_items_in_batch"] = (batch["completion_mask"] * batch["tool_mask"]).sum()
        built.append(batch)
    return built


def real_tokens(batch: dict[str, Any]) -> int:
    return int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure_steps(trainer: Any, steps: list[dict[str, Any]], warmup: int) -> dict[str, float]:
    """Loss + backward + AdamW step on each batch; the first `warmup` untimed, or with -1 a whole
    untimed pass over every batch first (on a GPU: Triton autotuning and compiles happen per shape)."""
    import torch

    params = [p for p in trainer.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)

    def step(batch: dict[str, Any]) -> None:
        optimizer.zero_grad(set_to_none=True)
        trainer.compute_loss(trainer.model, dict(batch)).backward()
        optimizer.step()

    for batch in steps if warmup < 0 else steps[:warmup]:  # -1: a whole untimed pass first
        step(batch)
    cuda = torch.cuda.is_available()
    measured = steps if warmup < 0 else steps[warmup:]
    with PeakMemory(cuda) as memory:
        sync()
        started = time.perf_counter()
        for batch in measured:
            step(batch)
        sync()
        seconds = time.perf_counter() - started
    tokens = sum(real_tokens(b) for b in measured)
    return {
        "step_tokens": tokens,
        "step_rows": sum(int(b["prompt_ids"].size(0)) for b in measured),
        "step_forwarded": sum(forwarded_tokens(trainer, b) for b in measured),
        "step_s": seconds,
        "step_peak": memory.peak,
    }


def forwarded_tokens(trainer: Any, batch: dict[str, Any]) -> int:
    """Tokens the step's forward pass computes: the tree's nodes when packed, else the rows' own."""
    import torch

    from training.tree_pack import pack_rows

    if getattr(trainer.args, "tree_packing", False):
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        pack = pack_rows(ids, mask, batch["completion_ids"].size(1), multiple=128 if ids.is_cuda else 1)
        if pack is not None:
            return pack.nodes
    return real_tokens(batch)


def measure_logprob_pass(trainer: Any, steps: list[dict[str, Any]]) -> dict[str, float]:
    """The round-start pass: no-grad logprobs of every row, `ROUND_START_BATCH_FACTOR` x wider."""
    import torch

    from training.grpo_trainer import ROUND_START_BATCH_FACTOR

    per_forward = GROUP_SIZE * ROUND_START_BATCH_FACTOR
    inputs = [
        (
            torch.cat([b["prompt_ids"], b["completion_ids"]], 1),
            torch.cat([b["prompt_mask"], b["completion_mask"]], 1),
        )
        for b in steps
    ]
    width = max(ids.size(1) for ids, _ in inputs)  # left-align the groups' padded rows into one tensor
    ids = torch.cat([torch.nn.functional.pad(i, (width - i.size(1), 0)) for i, _ in inputs])
    mask = torch.cat([torch.nn.functional.pad(m, (width - m.size(1), 0)) for _, m in inputs])
    keep = max(b["completion_ids"].size(1) for b in steps)
    trainer.model.eval()
    if torch.cuda.is_available():  # once untimed: autotuning and compiles per shape
        with torch.no_grad():
            trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, batch_size=per_forward)
    with torch.no_grad(), PeakMemory(torch.cuda.is_available()) as memory:
        sync()
        started = time.perf_counter()
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, batch_size=per_forward)
        sync()
        seconds = time.perf_counter() - started
    trainer.model.train()
    return {"pass_tokens": int(mask.sum()), "pass_s": seconds, "pass_peak": memory.peak}


def run(
    args: argparse.Namespace, work: Path, tiny: Path, flex: bool = False, groups_per_step: int = 1
) -> list[dict[str, Any]]:
    """Every implementation on the same batches, one after another in one process; a row each.
    `flex` adds tree packing on FlexAttention (GPU); a row that fails says why. Each step
    trains on `groups_per_step` groups (the trainer's batch size: G x that)."""
    import torch
    from transformers import AutoConfig

    if getattr(args, "model", None):
        from training.models.known import resolve_model

        model = Path(resolve_model(args.model))
    else:
        model = work / "wide"
        if not (model / "config.json").exists():
            wide_model(model, args.layers, args.vocab, tiny, getattr(args, "width", None))
    cuda = torch.cuda.is_available()
    vocab = AutoConfig.from_pretrained(model).vocab_size
    rows = agent_groups(args.groups, args.prompt_len, min(vocab, 1024), seed=0)
    pad_id = AutoConfig.from_pretrained(model).pad_token_id or 0
    # the same tensors for every implementation
    steps = batches(rows, pad_id, "cuda" if cuda else "cpu", groups_per_step)
    results = []
    for name, ours, packing, attention in IMPLEMENTATIONS + ((FLEX,) if flex else ()):
        result: dict[str, Any] = {"implementation": name}
        try:
            trainer = trainer_for(model, rows, ours, packing, attention, cuda, work, groups_per_step)
            result.update(measure_steps(trainer, steps, warmup=-1 if cuda or len(steps) < 2 else 1))
            result.update(measure_logprob_pass(trainer, steps))
            from store.metrics import TREE_PACKING_SAVED_SHARE

            own = getattr(trainer, "step_metrics", {"train": {}})["train"]  # stock TRL's has none
            saved = own.get(TREE_PACKING_SAVED_SHARE) or [0.0]
            result["saved_share"] = saved[-1]
        except Exception as error:  # a kernel this machine lacks: the row says so, the others stand
            result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        results.append(result)
        trainer = None
        if cuda:
            torch.cuda.empty_cache()
    return results


def table_rows(
    results: list[dict[str, Any]], flops_per_token: float | None, peak_flops: float | None
) -> list[dict[str, str]]:
    """The results as table cells, ratios against the first row (stock TRL) of the same run.
    MFU: forwarded tokens x `flops_per_token` / seconds / `peak_flops` (where both are known)."""
    stock = results[0]
    out = []
    for r in results:
        if "error" in r:
            out.append({"implementation": r["implementation"], "step tokens/s": f"failed: {r['error']}"})
            continue
        step, passed = r["step_tokens"] / r["step_s"], r["pass_tokens"] / r["pass_s"]
        mfu = (
            f"{r['step_forwarded'] * flops_per_token / r['step_s'] / peak_flops:.1%}"
            if flops_per_token and peak_flops
            else "-"
        )
        out.append(
            {
                "implementation": r["implementation"],
                "step tokens/s": f"{step:,.0f}",
                "vs stock": f"{step / (stock['step_tokens'] / stock['step_s']):.2f}x",
                "step peak MiB": f"{r['step_peak'] / 2**20:,.0f}",
                "step MFU": mfu,
                "round-start pass tokens/s": f"{passed:,.0f}",
                "pass vs stock": f"{passed / (stock['pass_tokens'] / stock['pass_s']):.2f}x",
                "pass peak MiB": f"{r['pass_peak'] / 2**20:,.0f}",
                "tokens saved": f"{r['saved_share']:.1%}",
            }
        )
    return out


def print_table(args: argparse.Namespace) -> None:
    """bench/grpo_agent.py's rows, printed with the ratios against stock TRL from the same run."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from training.tiny import tiny_model_path

    console = Console(width=160)
    work = Path(tempfile.mkdtemp(prefix="trajlake-bench-agent-"))
    try:
        results = run(args, work, tiny_model_path(work / "models"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    shape = args.model or f"Qwen2 0.5B width x {args.layers} layers"
    table = Table(
        title=f"GRPO on agent-shaped groups: {args.groups} groups x G=8, prompts ~{args.prompt_len} tokens, "
        f"{shape}, {'bf16' if torch.cuda.is_available() else 'fp32'}, {device}"
    )
    cells = table_rows(results, None, None)
    columns = [c for c in cells[0] if c != "step MFU"]
    for col in columns:
        table.add_column(col, justify="left" if col == "implementation" else "right")
    for row in cells:
        table.add_row(*(row.get(c, "") for c in columns))
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        help="A real model instead (a folder, hub id or known name: `smollm2-135m-instruct`, fetched with "
        "`trajlake model fetch`); --layers and --vocab are then its own.",
    )
    parser.add_argument("--layers", type=int, default=2, help="Layers of the 0.5B-width model.")
    parser.add_argument("--vocab", type=int, help="Vocabulary size (default: the tiny tokenizer's).")
    parser.add_argument("--groups", type=int, default=3, help="Groups of G=8 (one step each).")
    parser.add_argument("--prompt-len", type=int, default=1500, help="Prompt tokens per group (+-10%%).")
    print_table(parser.parse_args(argv))


if __name__ == "__main__":
    main()
