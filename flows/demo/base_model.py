"""The demo's base model: the tiny model, pretrained on a generic chat corpus, shipped as package data.

Nobody fine-tunes a randomly initialised network in practice: SFT and GRPO start from a
pretrained base that already speaks the chat format and can copy (an induction head:
the expression from the question into the tool call, the tool's number into the answer).
What the task wants (this system prompt, call the calculator with the question's
expression, answer with the bare number) is left for SFT on production traces and for
GRPO to teach: the corpus phrases answers as "The answer is 7." or "7 is the answer.",
never the bare number.

The copy skill is a phase change: the 113k-parameter model needs ~700 steps of 16 x 256
tokens (about 2 minutes on one core) before copying works, so the pretrained weights
are shipped (`base_model.safetensors`, fp16, ~230 KB) and loaded in a second. They are
tied to the tokenizer `training.tiny` builds: when its `tokenizer.json` is not the one
the weights were trained with (another tokenizer recipe), the same plain-torch
pretraining runs instead and its result is cached in `~/.cache/trajlake`.

Regenerate the shipped weights with `python -m flows.demo.base_model` (deterministic on
one thread).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

from training.tiny import _PHRASES, TOOLS, _render, build_tiny_model, training_corpus

MARKER = "trajlake-demo-base.json"
WEIGHTS = Path(__file__).with_name("base_model.safetensors")
# Bump when the corpus or the loop changes: cached and shipped weights of another recipe are not used.
RECIPE_VERSION = 2
RECIPE: dict[str, Any] = {
    "steps": 1500,
    "batch_size": 16,
    "seq_len": 256,
    "learning_rate": 3e-3,
    "warmup_steps": 10,
    "conversations": 800,  # the tokenizer corpus: chats with the long tools header
    "short_chats": 3000,  # tool-less calculator chats: dense in copying
    "echo_chats": 1500,  # "Repeat after me: -42 7" -> "-42 7": copying at the start of a turn, signed numbers
}


def pretraining_corpus(
    seed: int = 1, conversations: int = 800, short_chats: int = 3000, echo_chats: int = 1500
) -> list[str]:
    """Generic chats: the tokenizer corpus plus copy-dense short calculator chats and echo chats.

    Tool results come as `{"result": v}` or bare `v`, answers as "The answer is v." or "v is
    the answer.", numbers are signed and up to 999: the skills transfer to the demo's task
    but its exact answer format (the bare number) is not in the corpus.
    """
    rng = random.Random(seed + 7)
    texts = training_corpus(seed=seed, conversations=conversations) if conversations else []
    for _ in range(short_chats):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op = rng.choice("+-*")
        expression = f"{a} {op} {b}"
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        question = rng.choice(
            [
                f"What is {expression}?",
                f"Compute {expression}.",
                f"Please calculate {expression} for me.",
                f"{expression} = ?",
            ]
        )
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": rng.choice(_PHRASES[:2])}] if rng.random() < 0.5 else []
        )
        call = {"name": "calculator", "arguments": {"expression": expression}}
        result = str(value) if rng.random() < 0.5 else json.dumps({"result": value})
        answer = f"{value} is the answer." if rng.random() < 0.5 else f"The answer is {value}."
        messages += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
            {"role": "tool", "name": "calculator", "content": result},
            {"role": "assistant", "content": answer},
        ]
        texts.append(_render(messages, TOOLS if rng.random() < 0.2 else None))
    for _ in range(echo_chats):
        numbers = " ".join(str(rng.randint(-99, 999)) for _ in range(rng.randint(1, 4)))
        prefix = rng.choice(["Repeat after me: ", "Say exactly: ", "Copy this: "])
        texts.append(
            _render(
                [{"role": "user", "content": prefix + numbers}, {"role": "assistant", "content": numbers}],
                None,
            )
        )
    rng.shuffle(texts)
    return texts


def pretrain(
    model: Any, tokenizer: Any, *, seed: int = 0, log_every: int = 0, **overrides: Any
) -> list[float]:
    """Full-weight LM pretraining on `pretraining_corpus`: a plain torch loop, fp32, wrapped packing.

    Wrapped packing (concatenate the chats, cut rows of `seq_len`) keeps every token real and
    every row dense; on a CPU it is ~13x faster per token than TRL's padding-free `bfd`
    packing, whose flattened rows attention handles as one long sequence. Returns the losses.
    """
    import torch

    recipe = {**RECIPE, **overrides}
    steps, batch, seq_len = recipe["steps"], recipe["batch_size"], recipe["seq_len"]
    texts = pretraining_corpus(seed + 1, recipe["conversations"], recipe["short_chats"], recipe["echo_chats"])
    eos = tokenizer.eos_token_id
    stream = [t for text in texts for t in (*tokenizer.encode(text, add_special_tokens=False), eos)]
    rows = len(stream) // seq_len
    data = torch.tensor(stream[: rows * seq_len]).view(rows, seq_len)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe["learning_rate"], weight_decay=0.0, betas=(0.9, 0.95)
    )
    warmup = recipe["warmup_steps"]
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    model.float().train()
    order, position, losses = torch.randperm(rows, generator=generator), 0, []
    for step in range(steps):
        if position + batch > rows:
            order, position = torch.randperm(rows, generator=generator), 0
        x = data[order[position : position + batch]]
        position += batch
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if log_every and (step + 1) % log_every == 0:
            print(
                f"pretrain step {step + 1}/{steps} loss {sum(losses[-log_every:]) / log_every:.4f}",
                flush=True,
            )
    model.eval()
    return losses


def tokenizer_digest(model_dir: str | os.PathLike[str]) -> str:
    """sha256 of the tokenizer the weights belong to (its `tokenizer.json`)."""
    return hashlib.sha256((Path(model_dir) / "tokenizer.json").read_bytes()).hexdigest()


def recipe_key(model_dir: str | os.PathLike[str], seed: int, steps: int) -> str:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    shape = {
        k: config.get(k)
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "vocab_size",
        )
    }
    key = json.dumps(
        [RECIPE_VERSION, RECIPE, steps, seed, shape, tokenizer_digest(model_dir)], sort_keys=True
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def shipped_weights(tiny_model: Path, seed: int, steps: int) -> dict[str, Any] | None:
    """The shipped state dict when it was trained by this recipe for this tokenizer, else None."""
    if not WEIGHTS.exists():
        return None
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(WEIGHTS), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("recipe_key") != recipe_key(tiny_model, seed, steps):
        return None
    return load_file(str(WEIGHTS))


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trajlake"


def pretrain_base_model(
    tiny_model: Path,
    output: Path,
    *,
    steps: int | None = None,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The pretrained base in `output`: shipped weights when they fit, else pretrained (and cached).

    `steps=None` is the recipe's 1500 steps (what the shipped weights are); a marker file
    makes a second call a no-op.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tiny_model, output = Path(tiny_model), Path(output)
    steps = RECIPE["steps"] if steps is None else steps
    key = recipe_key(tiny_model, seed, steps)
    marker = output / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("recipe_key") == key:
        return output
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    state = shipped_weights(tiny_model, seed, steps)
    source = "shipped"
    if state is None:
        cached = Path(cache_dir or default_cache_dir()) / f"demo-base-{key}.safetensors"
        if cached.exists():
            from safetensors.torch import load_file

            state, source = load_file(str(cached)), "cache"
        else:
            pretrain(model, tokenizer, seed=seed, steps=steps)
            state, source = None, "pretrained"
            cached.parent.mkdir(parents=True, exist_ok=True)
            _save_weights(model, cached, key)
    if state is not None:
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        model.tie_weights()
    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    for extra in ("generation_config.json",):
        if (tiny_model / extra).exists():
            shutil.copy(tiny_model / extra, staging / extra)
    (staging / MARKER).write_text(
        json.dumps({"recipe_key": key, "steps": steps, "seed": seed, "source": source})
    )
    shutil.rmtree(output, ignore_errors=True)
    os.replace(staging, output)
    return output


def _save_weights(model: Any, path: Path, key: str) -> None:
    """fp16 weights (the tied output head stored once) with the recipe key as metadata."""
    from safetensors.torch import save_file

    state = {
        k: v.detach().to("cpu").half().contiguous()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight"
    }
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata={"recipe_key": key, "recipe": json.dumps(RECIPE)})
    os.replace(tmp, path)


def main() -> None:  # pragma: no cover - regenerates package data
    """Pretrain with the recipe on one thread and write `base_model.safetensors` next to this file."""
    import tempfile
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny_model(Path(tmp) / "tiny")
        model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        start = time.perf_counter()
        losses = pretrain(model, tokenizer, seed=0, log_every=100)
        print(f"pretrained in {time.perf_counter() - start:.0f}s, final loss {sum(losses[-50:]) / 50:.4f}")
        _save_weights(model, WEIGHTS, recipe_key(tiny, 0, RECIPE["steps"]))
    print(f"wrote {WEIGHTS} ({WEIGHTS.stat().st_size // 1024} KB)")


if __name__ == "__main__":  # pragma: no cover
    main()
