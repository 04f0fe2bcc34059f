"""The tiny model: loads with the Auto classes, tokenizes like Qwen2, templates tool calls, builds once."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.errors import TinyModelError
from training.tiny import MARKER, TOOLS, build_tiny_model, is_built


def _conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 12 * 7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "12 * 7"}},
                }
            ],
        },
        {"role": "tool", "name": "calculator", "content": '{"result": 84}'},
        {"role": "assistant", "content": "The answer is 84."},
    ]


def test_loads_with_auto_classes_and_generates(tiny_model: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.model_type == "qwen2"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert sum(p.numel() for p in model.parameters()) < 200_000
    ids = tokenizer("What is 2 + 2?", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_saved_tokenizer_json_and_loaded_tokenizer_agree(tiny_model: Path) -> None:
    # transformers rebuilds Qwen2Tokenizer from the vocab; ids must equal the raw tokenizer.json's.
    from tokenizers import Tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    raw = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    text = tokenizer.apply_chat_template(_conversation(), tools=TOOLS, tokenize=False)
    assert tokenizer(text)["input_ids"] == raw.encode(text).ids
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_chat_template_is_trls_qwen25_and_tool_tags_are_single_tokens(tiny_model: Path) -> None:
    from trl.chat_template_utils import get_training_chat_template, qwen2_5_chat_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert tokenizer.chat_template == qwen2_5_chat_template
    assert "{% generation %}" in get_training_chat_template(tokenizer)
    for tag in ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>"):
        assert len(tokenizer(tag)["input_ids"]) == 1, tag
    text = tokenizer.apply_chat_template(_conversation(), tools=TOOLS, tokenize=False)
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 7"}}\n</tool_call>' in text
    assert '<tool_response>\n{"result": 84}\n</tool_response>' in text


def test_tokenizer_is_not_byte_by_byte(tiny_model: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = tokenizer.apply_chat_template(_conversation(), tools=TOOLS, tokenize=False)
    # Trained on this domain: far fewer tokens than bytes.
    assert len(tokenizer(text)["input_ids"]) < len(text.encode()) / 3
    for word in ("assistant", "user", "calculator", "arguments"):
        assert len(tokenizer(word)["input_ids"]) == 1, word


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_build_is_deterministic_and_cached(tmp_path: Path, tiny_model: Path) -> None:
    other = build_tiny_model(tmp_path / "again")
    assert _digest(other) == _digest(tiny_model)
    marker_time = (other / MARKER).stat().st_mtime_ns
    assert build_tiny_model(other) == other  # complete: a no-op
    assert (other / MARKER).stat().st_mtime_ns == marker_time
    assert is_built(other, seed=0) and not is_built(other, seed=1)


def test_different_seed_gives_different_weights(tmp_path: Path, tiny_model: Path) -> None:
    other = build_tiny_model(tmp_path / "seed1", seed=1)
    a = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    b = AutoModelForCausalLM.from_pretrained(other).state_dict()
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])
    assert json.loads((other / MARKER).read_text())["seed"] == 1


def test_incomplete_folder_is_rebuilt_and_foreign_folder_refused(tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text("{}")  # a killed build: no marker
    build_tiny_model(partial)
    assert is_built(partial)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(TinyModelError, match="foreign") as err:
        build_tiny_model(foreign)
    assert err.value.path == str(foreign)
    assert (foreign / "notes.txt").read_text() == "mine"


# vLLM 0.32's CPU attention (`Unsupported CPU attention configuration: head_dim=16`); the GPU
# kernels start at 32 too.
VLLM_CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}


def test_the_tiny_shape_runs_on_vllms_attention_kernels(tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert head_dim in VLLM_CPU_HEAD_SIZES
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
