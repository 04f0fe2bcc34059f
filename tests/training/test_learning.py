"""Learning: rounds of replay -> programmatic score -> GRPO raise the val reward, and the gate promotes it.

Evaluation is what the pipeline does: replay the val scenarios with each policy, score
them with judging, compare the policies paired by scenario (bootstrap CI), publish once.

The toy task: emit tokens from one class, the quarter of the vocabulary whose embeddings
point most towards the token "7" (a class the policy can reach by turning one direction
of its last hidden state). The reward is the fraction of sampled completion tokens in
the class; it is dense (about 0.2 at the start) and deterministic.

The base is the session's tiny model with its (tied) embeddings scaled x4: at the stock
init (std 0.02) the logits of a 64-wide model span about +-1.3 nats whatever the hidden
state, which caps what any LoRA adapter can change (0.22 -> at most 0.31 on this task).
Scaling the embeddings lifts that cap without pretraining anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from judging.config import ScoreConfig
from judging.evaluation_stats import compare, scenario_scores
from judging.registry import ProgrammaticReward, from_function
from judging.stage import score
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from training.grpo import train_grpo
from training.grpo_config import TrajlakeGRPOConfig
from training.publish import EvalGate, PublishConfig, publish
from training.registry import read_manifest
from training.replay.samplers import SamplingParams, make_sampler
from training.replay.stage import ReplayConfig, replay

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

VAL = "SELECT scenario_id FROM scenarios WHERE split = 'val'"
# Three rounds learned +0.14 to +0.18 on Intel but +0.057 [-0.007, +0.118] on a 2-core AMD EPYC
# (Zen 4), every run alike: its float32 kernels round differently, so the samples and the rounds
# differ. Four: +0.118 [+0.053, +0.175] there (five: +0.125), 2026-11-29.
ROUNDS = 4


@pytest.fixture(scope="module")
def capable_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("capable-tiny")
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(4.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(out)
    return out


def class_reward_for(model_path: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    embeddings = AutoModelForCausalLM.from_pretrained(model_path).get_input_embeddings().weight.detach()
    seven = embeddings[AutoTokenizer.from_pretrained(model_path).convert_tokens_to_ids("7")]
    ranked = torch.argsort(embeddings @ seven, descending=True)
    target = set(ranked[: len(ranked) // 4].tolist())

    def class_reward(trajectory: dict, scenario: dict | None) -> float:
        ids = [t for turn in trajectory["turns"] for t in turn["completion_token_ids"]]
        return sum(t in target for t in ids) / max(len(ids), 1)

    return class_reward


def scenario(i: int, split: str) -> dict:
    message = {
        "role": "user",
        "content": f"Say a number {i}.",
        "name": None,
        "tool_call_id": None,
        "tool_calls": [],
        "is_error": None,
    }
    return {
        "scenario_id": f"{split}-{i}",
        "messages": [message],
        "split": split,
        "created_at": utc_now(),
    }


def sample_and_score(
    lake: Lake,
    model: str,
    adapter: str | None,
    scenarios: str,
    run: str,
    reward: ProgrammaticReward,
) -> tuple[str, list[str]]:
    """Replay `scenarios` with the policy and score the groups with `reward`: (policy, group ids)."""
    with make_sampler("transformers", model, adapter=adapter) as sampler:
        sampled = replay(
            lake,
            scenarios,
            sampler,
            ReplayConfig(group_size=8, run=run, sampling=SamplingParams(max_tokens=8, seed=0)),
            progress=False,
        )
        policy = sampler.policy
    groups = [*sampled.group_ids, *sampled.skipped_group_ids]
    where = "group_id IN (" + ", ".join(f"'{g}'" for g in groups) + ")"
    score(lake, reward, ScoreConfig(where=where, load_turns=True, progress=False))
    return policy, groups


def test_grpo_rounds_raise_val_reward_and_pass_the_gate(
    lake: Lake, capable_model: Path, tmp_path: Path
) -> None:
    write(
        lake, "scenarios", [scenario(i, "train") for i in range(4)] + [scenario(i, "val") for i in range(8)]
    )
    reward = from_function(class_reward_for(capable_model), name="class", version="1")
    model = str(capable_model)

    base_policy, base_groups = sample_and_score(lake, model, None, VAL, "eval", reward)
    adapter: str | None = None
    for round_ in range(ROUNDS):
        _, groups = sample_and_score(
            lake,
            model,
            adapter,
            "SELECT scenario_id FROM scenarios WHERE split = 'train'",
            f"round{round_}",
            reward,
        )
        config = TrajlakeGRPOConfig(
            output_dir="unused",
            per_device_train_batch_size=8,
            num_train_epochs=2,
            learning_rate=5e-2,
            lr_scheduler_type="constant",
            mask_truncated_completions=False,  # every completion stops at the 8-token budget here
            activation_checkpointing=False,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
            reward_name="class",
        )
        quoted = ", ".join(f"'{g}'" for g in groups)
        result = train_grpo(
            lake,
            f"SELECT trajectory_id FROM trajectories WHERE group_id IN ({quoted})",
            model,
            adapter,
            tmp_path / f"r{round_}",
            config,
        )
        adapter = result.adapter_dir

    policy, groups = sample_and_score(lake, model, adapter, VAL, "eval", reward)
    comparison = compare(
        "class",
        (policy, scenario_scores(lake, "class", groups)),
        (base_policy, scenario_scores(lake, "class", base_groups)),
    )
    # Measured: 0.210 -> 0.358 (val: 8 scenarios x 8 samples x 8 tokens; eval noise ~0.025). With
    # all-equal groups skipped: +0.14 to +0.18 in 9 runs alone, one +0.077 [+0.042, +0.109] inside the
    # full suite (concurrent requests share sampler batches, so samples vary with timing).
    assert comparison.paired_scenarios == 8
    assert comparison.difference > 0.05 and comparison.better, comparison

    gate = EvalGate(
        candidate=comparison.candidate.mean,
        incumbent=comparison.baseline.mean,
        incumbent_name="base",
        difference=comparison.difference,
        difference_ci=comparison.difference_ci,
        scenarios=comparison.paired_scenarios,
        reward="class",
    )
    published = publish(lake, adapter, PublishConfig(name="toy"), aliases=["latest", "production"], gate=gate)
    assert published.gate is gate and "production" in published.aliases
    manifest = read_manifest(published.path)
    assert manifest["stages"] == ["grpo"] * ROUNDS and len(manifest["lineage"]) == ROUNDS
    assert manifest["eval"]["incumbent_name"] == "base" and manifest["eval"]["promoted"] is True
