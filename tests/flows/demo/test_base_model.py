"""The demo's base model: shipped weights load in a second; another recipe pretrains once and is cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.demo.base_model import MARKER, pretrain_base_model, pretraining_corpus

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


def test_shipped_weights_load_and_copy(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = pretrain_base_model(tiny_model, tmp_path / "base", cache_dir=tmp_path / "cache")
    assert json.loads((base / MARKER).read_text())["source"] == "shipped"
    assert not (tmp_path / "cache").exists()  # nothing pretrained
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    # the copy skill SFT builds on: echo a signed number at the start of a turn, greedily
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Repeat after me: -42 807"}], tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    out = model.generate(input_ids=ids, max_new_tokens=12, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1] :]).startswith("-42 807<|im_end|>")


def test_other_recipe_pretrains_once_then_uses_the_cache(tiny_model: Path, tmp_path: Path) -> None:
    first = pretrain_base_model(tiny_model, tmp_path / "a", steps=3, cache_dir=tmp_path / "cache")
    assert json.loads((first / MARKER).read_text())["source"] == "pretrained"
    assert len(list((tmp_path / "cache").glob("demo-base-*.safetensors"))) == 1
    second = pretrain_base_model(tiny_model, tmp_path / "b", steps=3, cache_dir=tmp_path / "cache")
    assert json.loads((second / MARKER).read_text())["source"] == "cache"


def test_corpus_never_shows_the_bare_answer_format() -> None:
    texts = pretraining_corpus(seed=1, conversations=0, short_chats=200, echo_chats=0)
    answers = [t.rsplit("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0] for t in texts]
    assert all(a.startswith("The answer is ") or a.endswith(" is the answer.") for a in answers)
