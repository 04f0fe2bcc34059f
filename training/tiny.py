"""A tiny Qwen2-style chat model with tool calling, built offline and deterministically in seconds.

Tests and `trajlake demo` need a real causal LM (real `generate`, real TRL/PEFT training
steps, real chat template) but nothing can be downloaded here. `build_tiny_model` makes one:

- a byte-level BPE tokenizer trained on a small embedded corpus (chat turns, JSON tool calls,
  the demo's arithmetic domain), with Qwen2's exact normaliser and pre-tokenizer, because
  transformers rebuilds a `Qwen2Tokenizer` from `model_type=qwen2` and would otherwise give
  ids that differ from the saved `tokenizer.json`;
- the special tokens `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos), and the
  Hermes tool tags as ordinary added tokens, so a tool call is a handful of tokens;
- TRL's stock Qwen2.5 chat template, verbatim, so `trl.chat_template_utils.
  get_training_chat_template` maps it to its `{% generation %}` twin (assistant-only loss);
- a randomly initialised `Qwen2ForCausalLM` (~100k parameters) and a `GenerationConfig`
  with eos and pad.

Everything is saved with `save_pretrained`, so `AutoModelForCausalLM.from_pretrained(path)`
and `AutoTokenizer.from_pretrained(path)` load it. A marker file written last makes a
second build into the same folder a no-op.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

from training.errors import TinyModelError

MARKER = "trajlake-tiny-model.json"
# Bump when the recipe changes: a cached model built by an older recipe is rebuilt.
RECIPE_VERSION = 2

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, "<|im_start|>", EOS_TOKEN)
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
VOCAB_SIZE = 1024
PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# The demo's domain: arithmetic with a calculator tool, a lookup tool, short answers.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression and return the number.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 12 * (3 + 4)"}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a fact in the knowledge base.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]

_PHRASES = [
    "You are a helpful assistant.",
    "You are a careful math assistant. Use the calculator tool when needed.",
    "What is the answer?",
    "The answer is",
    "Let me compute that with the calculator.",
    "I will look that up.",
    "Sorry, the tool returned an error. Let me try again.",
    "error: unknown tool",
    "error: no recorded result for this call",
    "Thank you! Is there anything else I can help with?",
    "Please compute the total cost of the order.",
    "How many apples are left if you eat some of them?",
    "The capital of France is Paris.",
    "The weather today is sunny with a high of 21 degrees.",
]


def _render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """Render a conversation with the real chat template (jinja, as transformers does)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    # transformers annotates `-> str`; it returns (rendered conversations, assistant masks)
    rendered, _ = render_jinja_template(  # type: ignore[str-unpack]
        conversations=[messages],
        tools=list(tools) if tools else None,
        chat_template=chat_template(),
        add_generation_prompt=False,
    )
    return str(rendered[0])


def chat_template() -> str:
    """TRL's stock Qwen2.5 chat template, read from the installed TRL so the strings match exactly."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def training_corpus(seed: int = 0, conversations: int = 600) -> list[str]:
    """Deterministic corpus: rendered chats with tool calls, plain chats and arithmetic strings."""
    rng = random.Random(seed)
    ops = ["+", "-", "*"]
    texts: list[str] = list(_PHRASES)
    texts.append(json.dumps(TOOLS))
    for i in range(conversations):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op = rng.choice(ops)
        expression = f"{a} {op} {b}"
        value: int | str = {"+": a + b, "-": a - b, "*": a * b}[op]
        question = rng.choice(
            [f"What is {expression}?", f"Compute {expression}.", f"Please calculate {expression} for me."]
        )
        system = {"role": "system", "content": rng.choice(_PHRASES[:2])}
        if i % 3 == 0:
            messages: list[dict[str, Any]] = [
                system,
                {"role": "user", "content": question},
                {"role": "assistant", "content": str(value)},
            ]
            texts.append(_render(messages, None))
            continue
        call: dict[str, Any] = {"name": "calculator", "arguments": {"expression": expression}}
        if i % 3 == 2:
            call = {"name": "lookup", "arguments": {"query": rng.choice(_PHRASES[10:])}}
            value = rng.choice(_PHRASES[12:])
        messages = [
            system,
            {"role": "user", "content": question},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
            {"role": "tool", "name": call["name"], "content": json.dumps({"result": value})},
            {"role": "assistant", "content": f"The answer is {value}."},
        ]
        texts.append(_render(messages, TOOLS))
    return texts


def _train_tokenizer(seed: int):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tokenizer = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=3,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The tags are stripped from the corpus: they become single added tokens below, so
    # spending merges on them would be wasted vocabulary.
    # At encode time the added tokens cut the text into segments, so train on the same segments.
    splitter = re.compile("|".join(re.escape(tag) for tag in (*SPECIAL_TOKENS, *TOOL_TAGS)))
    segments = [piece for text in training_corpus(seed) for piece in splitter.split(text) if piece]
    tokenizer.train_from_iterator(segments, trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TOOL_TAGS])
    return tokenizer


def _build(path: Path, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(seed),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=4096,
        padding_side="left",
        chat_template=chat_template(),
    )
    tokenizer.save_pretrained(path)
    # transformers maps `model_type=qwen2` to Qwen2Tokenizer; record that class so the
    # loaded tokenizer is the one real Qwen2 checkpoints get.
    config_path = path / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    tok_config["tokenizer_class"] = "Qwen2Tokenizer"
    config_path.write_text(json.dumps(tok_config, indent=2, sort_keys=True))

    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = cast(int, tokenizer.convert_tokens_to_ids(PAD_TOKEN))  # one token in, one id out
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        # head_dim 32: vLLM's attention kernels (CPU and GPU) take head sizes from 32 up, and
        # 2 x 32 query / 1 x 32 key-value heads keep the parameter count of 4 x 16 / 2 x 16.
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    model.save_pretrained(path)


def is_built(path: str | Path, seed: int | None = None) -> bool:
    """True when `path` holds a complete tiny model from this recipe (and seed, if given)."""
    marker = Path(path) / MARKER
    if not marker.exists():
        return False
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return info.get("recipe") == RECIPE_VERSION and (seed is None or info.get("seed") == seed)


def build_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Build the tiny model and tokenizer into `path` and return it; a no-op if already complete.

    The build goes to a sibling temporary folder that is renamed into place, and the marker is
    written last, so a killed build never leaves a folder that looks complete.
    """
    path = Path(path)
    if is_built(path, seed):
        return path
    looks_foreign = not (path / MARKER).exists() and not (path / "config.json").exists()
    if path.exists() and any(path.iterdir()) and looks_foreign:
        raise TinyModelError(
            f"`{path}` exists and is not a tiny-model folder (files: "
            f"{', '.join(sorted(p.name for p in path.iterdir())[:5])}); pick an empty or new path",
            path=str(path),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        _build(staging, seed)
        (staging / MARKER).write_text(json.dumps({"recipe": RECIPE_VERSION, "seed": seed}))
        if path.exists():
            shutil.rmtree(path)
        try:
            os.replace(staging, path)
        except OSError:
            # Another process finished the same build first: theirs is as good as ours.
            if not is_built(path, seed):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return path


def tiny_model_path(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """A built tiny model in a cache folder (default: `~/.cache/trajlake/tiny-model-s<seed>`)."""
    root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "trajlake"
    return build_tiny_model(root / f"tiny-model-v{RECIPE_VERSION}-s{seed}", seed=seed)
