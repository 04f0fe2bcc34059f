"""The demo's sizes and its `trajlake.toml`: what each demo run samples, trains and evaluates.

The tiny model's sizes (`SIZES`) are the default demo's; a real base model gets its own
(`REAL_SIZES`, chosen by `sizes_for`): its budgets fit a 2-core CPU, its questions are the
mixed task (`flows.demo.task`: simple, two-operation and word problems, the production LLM
misreading a share of the word problems), and its learning rates suit LoRA on 135M
parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flows.demo.serving import TEMPERATURE
from flows.demo.task import TASKS
from training.models.known import KNOWN_MODELS

TINY_MODEL = "tiny"  # `--model`'s default: the tiny model built and shipped with trajlake


@dataclass(frozen=True)
class DemoSize:
    questions: int  # production agent runs (per batch)
    train_scenarios: int  # scenarios replayed per round (a new slice of the train split each round)
    rounds: int  # replay -> score -> GRPO rounds
    group_size: int
    eval_group_size: int  # samples per val scenario
    sft_epochs: float
    grpo_epochs: float
    grpo_batch_size: int
    max_new_tokens: int
    second_night_rounds: int  # GRPO rounds of the second pipeline run (on the adapter's traffic)
    served_questions: int = 0  # agent runs the published adapter serves (0: `questions`)
    # the real model's: the tiny model's demo keeps these defaults
    task: str = "simple"  # the questions (`flows.demo.task.TASKS`)
    sft_learning_rate: float = 1e-2
    sft_max_steps: int = -1  # > 0: overrides sft_epochs
    grpo_learning_rate: float = 1e-3
    grpo_warmup_steps: int = 5
    grpo_activation_checkpointing: bool = False  # recompute activations: about half the peak memory
    val_fraction: float = 0.25
    sft_excludes_replayed: bool = False  # `pipeline.sft_excludes_replayed`
    sft_on_production: bool = False  # `pipeline.sft_on_production`: night 2 SFTs v1 on its well-rated runs
    evaluate_intermediate: bool = True  # off: each night evaluates only its ends (`evaluate.intermediate`)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown demo task `{self.task}`; known: {', '.join(TASKS)}")


SIZES = {
    "full": DemoSize(
        questions=300,
        train_scenarios=64,
        rounds=5,
        group_size=8,
        eval_group_size=4,
        sft_epochs=0.35,
        grpo_epochs=1.0,
        grpo_batch_size=32,
        max_new_tokens=40,
        second_night_rounds=2,
    ),
    "small": DemoSize(
        questions=24,
        train_scenarios=6,
        rounds=1,
        group_size=2,
        eval_group_size=2,
        sft_epochs=1.0,
        grpo_epochs=1.0,
        grpo_batch_size=8,
        max_new_tokens=24,
        second_night_rounds=1,
    ),
}

# SmolLM2-135M-Instruct on a 2-core CPU (README: the real model's demo, measured). A short SFT
# warm start (the pilot: 7 steps of 8 reached 0.66 at T=1 with 95% of groups
# informative; 50 steps finished the simple task alone) leaves the word problems to GRPO.
REAL_SIZES = {
    "full": DemoSize(
        # 600 runs give ~120 val scenarios: the paired interval's half-width is set by how many
        # scenarios differ, not by samples each (at 300 runs, 61 x 4 samples: +-0.072)
        questions=600,
        train_scenarios=24,
        # 3 rounds replay the 62 labelled failures first, then well-rated questions. A 4th (24 more
        # well-rated questions, left to GRPO instead of SFT) took GRPO's gain over SFT on vLLM
        # from +0.053 to +0.093 but on transformers from +0.118 to +0.073 (SFT 0.801 -> 0.850, v1
        # 0.919 -> 0.923), and night 2 learned nothing it could promote (2026-12-01): not kept
        rounds=3,
        group_size=16,  # at 8, 15-23 of a round's 24 groups had equal rewards: unequal ones twice as large
        eval_group_size=2,  # and 2 samples each: the evaluation costs about what 61 x 4 did
        sft_epochs=1.0,
        sft_max_steps=24,  # 0.6 epochs of the ~313 well-rated conversations GRPO does not replay (tree-packed)
        grpo_epochs=2.0,  # each round's groups twice (clipped ratios): GRPO is ~20 s of a ~160 s round
        grpo_batch_size=16,
        max_new_tokens=48,  # a Hermes tool call of a word problem's expression is <= 40 SmolLM2 tokens
        second_night_rounds=2,  # night 2 replays v1's failures first (`slice_selection`): two rounds of them
        task="mixed",
        sft_learning_rate=5e-4,
        grpo_learning_rate=1e-4,  # 5e-4 took the SFT start (0.817) down to 0.714 in round 1 (2026-11-28 run)
        grpo_warmup_steps=2,
        grpo_activation_checkpointing=True,
        # SFT had imitated every conversation GRPO replayed: 23 of 24 groups equal at mean reward
        # 0.996 in round 3 against 0.82 on val (2026-11-29), so GRPO gained +0.025
        sft_excludes_replayed=True,
        # night 2 first imitates v1's own well-rated production runs, then GRPO replays its failures:
        # GRPO alone swung -0.056..+0.013 against v1 (its first round trains on little more than the
        # failures); with SFT first the same two lakes gave +0.024 [+0.002, +0.048] and +0.004, and a
        # fresh demo +0.053 [+0.029, +0.080] (2026-11-30)
        sft_on_production=True,
        # evaluation was 60% of the real model's demo (3,021 of 5,021 s, 2026-11-28): the rounds
        # before the last and night 2's base model were ~45% of it, and no gate reads them
        evaluate_intermediate=False,
    ),
    "small": DemoSize(
        questions=24,
        train_scenarios=4,
        rounds=1,
        group_size=2,
        eval_group_size=2,
        sft_epochs=1.0,
        sft_max_steps=2,
        grpo_epochs=1.0,
        grpo_batch_size=8,
        max_new_tokens=48,
        second_night_rounds=1,
        task="mixed",
        sft_learning_rate=5e-4,
        grpo_learning_rate=3e-4,
        grpo_warmup_steps=1,
        grpo_activation_checkpointing=True,
        # the smoke run takes every path the full run takes: night 2 SFTs v1 on its production first
        sft_excludes_replayed=True,
        sft_on_production=True,
        evaluate_intermediate=False,
    ),
}


def sizes_for(model: str) -> dict[str, DemoSize]:
    """The demo sizes of a base model: the tiny model's, or a real model's (a known name, a model
    folder or a hub id); an empty name is an error."""
    if not model:
        raise ValueError(f"no demo model named; use `{TINY_MODEL}` or one of {', '.join(KNOWN_MODELS)}")
    return SIZES if model == TINY_MODEL else REAL_SIZES


SQL_RECIPES = [
    (
        "Production trajectories with their model and tool use",
        "SELECT trajectory_id, model, len(messages) AS messages, input_tokens, output_tokens FROM trajectories WHERE source = 'otel' LIMIT 5",
    ),
    (
        "Every message of one trajectory, in order",
        "SELECT position, role, name, content, tool_calls FROM messages WHERE trajectory_id = (SELECT min(trajectory_id) FROM trajectories WHERE source = 'otel') ORDER BY position",
    ),
    (
        "User feedback from production",
        "SELECT name, scorer, avg(value) AS mean, count(*) AS n FROM rewards GROUP BY ALL",
    ),
    (
        "Reward per round (policy)",
        "SELECT t.policy, avg(r.value) AS mean_reward, count(*) AS n FROM trajectories t JOIN latest_rewards r USING (trajectory_id) WHERE t.source = 'replay' GROUP BY ALL ORDER BY min(t.started_at)",
    ),
    (
        "Groups GRPO learns from (unequal rewards)",
        "SELECT * FROM groups WHERE NOT all_equal ORDER BY std DESC LIMIT 10",
    ),
    (
        "Token data of a replayed trajectory",
        "SELECT trajectory_id, len(turns) AS turns, len(turns[1].completion_token_ids) AS completion_tokens, turns[1].finish_reason FROM trajectories WHERE source = 'replay' LIMIT 5",
    ),
    (
        "Published adapters and their lineage",
        "SELECT name, version, aliases, stages, data FROM adapters ORDER BY version",
    ),
]


def write_demo_config(
    path: Path,
    lake: Path,
    model: Path | str,
    size: DemoSize,
    judge: tuple[str, str] | None,
    vllm_url: str | None = None,
) -> Path:
    """The demo's `trajlake.toml` (also a worked example of the configuration).

    With `vllm_url`, replay and evaluation sample from that vLLM server, and GRPO corrects
    the sampler/trainer mismatch with truncated importance sampling. The lake and the model
    are written relative to the file (`./lake`) when they lie beside it, so a copied workdir
    reads and writes its own lake (the vLLM server's model keeps the name it is served under).
    """
    well_rated = (
        "SELECT trajectory_id FROM trajectories WHERE source = 'otel' AND has_content AND trajectory_id IN "
        "(SELECT trajectory_id FROM latest_rewards WHERE name = 'user_feedback' AND value >= 1)"
    )
    # What production got wrong becomes scenarios too: a thumbs-down whose user sent the right
    # answer (a label) is scored against it; without a label only a reward that needs no expected
    # answer (RULER, with a judge) can score it, so the demo takes those only when it has a judge
    # (the report's judged failures). Rounds replay them only for a training reward that needs no
    # expected answer (`training_reward_needs_expected`): the demo trains on `calculator`.
    rated_wrong = "SELECT trajectory_id FROM latest_rewards WHERE name = 'user_feedback' AND value <= 0" + (
        "" if judge else " AND trajectory_id IN (SELECT trajectory_id FROM labels WHERE expected IS NOT NULL)"
    )
    scenarios = (
        "SELECT trajectory_id FROM trajectories WHERE source = 'otel' AND has_content AND (trajectory_id IN "
        f"(SELECT trajectory_id FROM latest_rewards WHERE name = 'user_feedback' AND value >= 1) OR trajectory_id IN ({rated_wrong}))"
    )
    # SFT never sees the conversations the val scenarios were cut from
    sft = f"{well_rated} AND trajectory_id NOT IN (SELECT source_trajectory_id FROM scenarios WHERE split = 'val')"
    rewards = ["flows.demo.task:calculator_reward", "exact_match", "tool_success"]
    judge_table = ""
    if judge:
        rewards.append("ruler")
        judge_table = f'\n[judge]\nmodel = "{judge[1]}"\nbase_url = "{judge[0]}"\n'
    path.write_text(
        f"""# Written by `trajlake demo`.
[lake]
path = "{beside(path, lake)}"

[select]
scenarios = "{scenarios}"
sft = "{sft}"

[scenarios]
val_fraction = {size.val_fraction}

[sampler]
model = "{model if vllm_url else beside(path, model)}"
{f'backend = "vllm-server"{chr(10)}base_url = "{vllm_url}"' if vllm_url else ""}

[replay]
group_size = {size.group_size}
concurrency = 64

[replay.sampling]
temperature = {TEMPERATURE}
max_tokens = {size.max_new_tokens}
seed = 0

[replay.limits]
max_turns = 3

[tools]
tool = ["flows.demo.task:calculator"]
recorded = false

[score]
rewards = {json.dumps(rewards)}
reward = "calculator"  # graded (0.2 call, 0.5 right call, 1 right answer): GRPO's signal
{judge_table}
[evaluate]
reward = "exact_match"  # success: the final answer is the expected number, as the user judged
group_size = {size.eval_group_size}
temperature = {TEMPERATURE}  # the temperature production serves at (0: the replay's)
production_reward = "user_feedback"
intermediate = {json.dumps(size.evaluate_intermediate)}  # false: each night's ends only (where it started, SFT, the candidate)

[train.sft]
num_train_epochs = {size.sft_epochs}
{f"max_steps = {size.sft_max_steps}{chr(10)}" if size.sft_max_steps > 0 else ""}learning_rate = {size.sft_learning_rate}
per_device_train_batch_size = 8
seed = 0
activation_checkpointing = false

[train.grpo]
loss_type = "dapo"
beta = 0.0
learning_rate = {size.grpo_learning_rate}  # with warmup and all-equal groups skipped (tiny model: 3e-3 collapsed, 5e-4 learned slower)
num_train_epochs = {size.grpo_epochs}
per_device_train_batch_size = {size.grpo_batch_size}
warmup_steps = {size.grpo_warmup_steps}  # each round's optimiser starts fresh: Adam's first sign-like steps knocked val success down
max_staleness = 0
seed = 0
activation_checkpointing = {json.dumps(size.grpo_activation_checkpointing)}
{"vllm_importance_sampling_correction = true  # vLLM's kernels are not the trainer's" if vllm_url else ""}

[publish]
name = "calculator-agent"

[pipeline]
rounds = {size.rounds}
scenarios_per_round = {size.train_scenarios}
max_workers = 2
start_from = "production"  # each night continues the adapter in production
window_days = 0  # and learns from the traffic that came in since the last night
sft_excludes_replayed = {json.dumps(size.sft_excludes_replayed)}
sft_on_production = {json.dumps(size.sft_on_production)}  # true: a night that continues the adapter SFTs it on its well-rated traffic first
latest_if_refused = true  # the demo serves night 1's adapter whatever the gate said: published as `latest`
"""
    )
    return path


def beside(config: Path, target: Path | str) -> str:
    """`target` as the config file at `config` should name it: `./x` when it lies in the file's
    folder (read back relative to the file), else as given (a folder elsewhere, a model name).

    >>> beside(Path("/w/trajlake.toml"), Path("/w/lake")), beside(Path("/w/t.toml"), "smollm2-135m-instruct")
    ('./lake', 'smollm2-135m-instruct')
    """
    if isinstance(target, Path) and target.is_relative_to(config.parent):
        return f"./{target.relative_to(config.parent).as_posix()}"
    return str(target)
