"""The demo's base model: the tiny model, briefly pretrained on its generic chat corpus.

Nobody fine-tunes a randomly initialised network in practice: SFT and GRPO start from a
pretrained base that already speaks the chat format. The demo imitates that in seconds:
the tiny model (`training.tiny`) is trained, all weights, on its tokenizer's generic
corpus (plain chats, calculator and lookup tool calls with other phrasings, numbers and
answer formats than the demo's task), so it can emit well-formed turns and stop. What
the task wants (this system prompt, call the calculator with the question's
expression, answer with the bare number) is left for SFT on production traces and for
GRPO to teach.
"""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "trajlake-demo-base.json"


def pretrain_base_model(tiny_model: Path, output: Path, *, steps: int = 150, seed: int = 0) -> Path:
    """Full-weight language-model training of `tiny_model` on its corpus; cached by a marker file."""
    marker = output / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("steps") == steps:
        return output
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from training.tiny import training_corpus

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    corpus = Dataset.from_dict({"text": training_corpus(seed=seed + 1, conversations=800)})
    work = output.with_name(output.name + ".work")
    config = SFTConfig(
        output_dir=str(work),
        max_steps=steps,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=10,
        max_length=256,
        packing=True,
        logging_steps=max(1, steps // 6),
        save_strategy="no",
        report_to="none",
        seed=seed,
        use_cpu=True,
        gradient_checkpointing=False,  # a 100k-parameter model: recomputation only costs time
        dataloader_pin_memory=False,
        disable_tqdm=False,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=corpus, processing_class=tokenizer)
    trainer.train()
    output.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    for extra in ("generation_config.json",):
        source = tiny_model / extra
        if source.exists():
            (output / extra).write_text(source.read_text())
    losses = [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]
    marker.write_text(json.dumps({"steps": steps, "seed": seed, "losses": losses}))
    return output
