"""`trajlake demo`: production traces in, a better published adapter out, on this machine.

The story, each step a real part:

1. build the tiny local model (the policy we will improve): its tokenizer is built here, its
   pretrained weights ship with trajlake (`flows/demo/base_model.py`);
2. start `trajlake collect` (the real OTLP/HTTP collector) and a scripted stand-in for the
   hosted production LLM, and run the calculator agent, instrumented with
   OpenTelemetry's OpenAI instrumentation, on a batch of questions: its spans reach the
   collector over OTLP/HTTP and become trajectories in the lake; the user's feedback
   (was the answer right?) arrives as `gen_ai.evaluation.result` events;
3. run the `trajlake-pipeline` Prefect flow: scenarios from the well-rated production
   trajectories, a short SFT warm start on them, rounds of group replay -> scoring ->
   GRPO, each on a fresh slice of the train scenarios, then the evaluation of every stage
   (base model, SFT, each round) on the val scenarios with 95% bootstrap CIs and paired
   differences, the production policy's success from its feedback as the reference, and
   publishing with that table in the manifest;
4. serve the published adapter with `trajlake serve-sampler`'s app and run the same
   instrumented agent on a second batch of questions: its traces name the adapter version
   (`calculator-agent-v1`), so `policy_performance` compares production before and after;
5. write the HTML report and print SQL to explore the lake.

The recipe, measured on one CPU core in the learn branch's research: a short SFT warm start
(~1/3 epoch: it teaches the answer format and gives every behaviour the task needs, negative
numbers included, some probability) and GRPO rounds on fresh slices of 64 train scenarios x 8
samples at T = 0.8, all-equal groups skipped, warmup 5 steps (each round's optimiser starts
fresh), on-policy groups only. A longer SFT alone gets about as far (the production traces it
imitates are filtered to correct ones); the warm start leaves RL the work, as the demo shows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from flows.demo.capture import capture_production_traces
from flows.demo.serving import TEMPERATURE, demo_vllm_server, serve_second_batch

console = Console()


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
    model: Path,
    size: DemoSize,
    judge: tuple[str, str] | None,
    vllm_url: str | None = None,
) -> Path:
    """The demo's `trajlake.toml` (also a worked example of the configuration).

    With `vllm_url`, replay and evaluation sample from that vLLM server, and GRPO corrects
    the sampler/trainer mismatch with truncated importance sampling.
    """
    well_rated = (
        "SELECT trajectory_id FROM trajectories WHERE source = 'otel' AND has_content AND trajectory_id IN "
        "(SELECT trajectory_id FROM latest_rewards WHERE name = 'user_feedback' AND value >= 1)"
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
path = "{lake}"

[select]
scenarios = "{well_rated}"
sft = "{sft}"

[scenarios]
val_fraction = 0.25

[sampler]
model = "{model}"
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
production_reward = "user_feedback"

[train.sft]
num_train_epochs = {size.sft_epochs}
learning_rate = 1e-2
per_device_train_batch_size = 8
seed = 0
activation_checkpointing = false

[train.grpo]
loss_type = "dapo"
beta = 0.0
learning_rate = 1e-3  # with warmup and all-equal groups skipped; 3e-3 collapsed, 5e-4 learned slower
num_train_epochs = {size.grpo_epochs}
per_device_train_batch_size = {size.grpo_batch_size}
warmup_steps = 5  # each round's optimiser starts fresh: Adam's first sign-like steps knocked val success down
max_staleness = 0
seed = 0
activation_checkpointing = false
{"vllm_importance_sampling_correction = true  # vLLM's kernels are not the trainer's" if vllm_url else ""}

[publish]
name = "calculator-agent"

[pipeline]
rounds = {size.rounds}
scenarios_per_round = {size.train_scenarios}
max_workers = 2
start_from = "production"  # each night continues the adapter in production
window_days = 0  # and learns from the traffic that came in since the last night
"""
    )
    return path


def run_demo(
    workdir: Path,
    size: str = "full",
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    backend: str = "transformers",
) -> dict[str, Any]:
    """Run every stage on `workdir` and return what was measured (also written to the report).

    `backend="vllm"` starts a real vLLM server of the base model (vLLM must be importable:
    `.ci/vllm-env`): replay and evaluation sample from it, and the published adapter is
    hot-loaded into it to serve the second production batch.
    """
    from contextlib import ExitStack

    from flows.demo.base_model import pretrain_base_model
    from training.tiny import build_tiny_model

    spec = SIZES[size]
    workdir = workdir.absolute()
    timings: list[tuple[str, float]] = []

    def step(name: str) -> float:
        console.rule(f"[bold]{name}")
        return time.perf_counter()

    def done(name: str, started: float) -> None:
        timings.append((name, time.perf_counter() - started))
        console.print(f"[dim]{name}: {timings[-1][1]:.1f} s[/]")

    stack = ExitStack()  # the vLLM server, where there is one: stopped however the demo ends
    try:
        start = step("1/6 the tiny base model (tokenizer built here, pretrained weights shipped)")
        model = pretrain_base_model(build_tiny_model(workdir / "tiny"), workdir / "model")
        done("base model", start)
        vllm_url = None
        if backend == "vllm":
            start = step("the base model on a vLLM server (replay, evaluation, serving)")
            vllm_url = stack.enter_context(demo_vllm_server(model, workdir, spec.max_new_tokens))
            done("vLLM server start", start)
        return _run_demo(workdir, spec, model, timings, step, done, judge_base_url, judge_model, vllm_url)
    finally:
        stack.close()


def _run_demo(
    workdir: Path,
    spec: DemoSize,
    model: Path,
    timings: list[tuple[str, float]],
    step: Any,
    done: Any,
    judge_base_url: str | None,
    judge_model: str | None,
    vllm_url: str | None,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from flows.demo.summary import print_learning, print_summary, print_timings
    from flows.prefect_flows import run_pipeline
    from flows.report import report_data, write_report

    lake = workdir / "lake"

    start = step("2/6 production agent -> OpenTelemetry -> trajlake collect -> lake")
    captured = capture_production_traces(lake, spec.questions)
    done("production batch 1 (production LLM)", start)
    console.print(
        f"agent runs: {captured['agent_runs']}, correct answers: {captured['correct']}, "
        f"trajectories in the lake: {captured.get('trajectories', '?')}"
    )

    start = step(
        "3/6 Prefect pipeline, night 1: scenarios, SFT, replay/score/GRPO rounds, evaluate every stage, publish"
    )
    judge = (judge_base_url, judge_model) if judge_base_url and judge_model else None
    config_file = write_demo_config(workdir / "trajlake.toml", lake, model, spec, judge, vllm_url)
    result = run_pipeline(str(config_file), str(lake), rounds=spec.rounds)
    done("pipeline night 1", start)
    print_timings(result.get("timings", []), title="Pipeline steps, night 1")
    print_learning(result)

    server = "vLLM, hot-loaded" if vllm_url else "trajlake serve-sampler"
    start = step(f"4/6 the published adapter serves a second production batch ({server})")
    published = result.get("published")
    second = (
        serve_second_batch(lake, model, published, spec.questions, spec.max_new_tokens, vllm_url=vllm_url)
        if published
        else None
    )
    done("production batch 2 (published adapter)", start)

    start = step(
        "5/6 Prefect pipeline, night 2: the adapter in production continued on the traffic it served"
    )
    night2 = run_pipeline(str(config_file), str(lake), rounds=spec.second_night_rounds)
    done("pipeline night 2", start)
    print_timings(night2.get("timings", []), title="Pipeline steps, night 2")
    print_learning(night2)
    console.print(f"night 2: [bold]{night2['run'].decision}[/]")

    start = step("6/6 report")
    newest = night2 if night2.get("evaluation") else result
    data = report_data(
        lake,
        "calculator",
        title="trajlake demo: calculator agent",
        evaluation=headline(newest),
        adapter_name="calculator-agent",
        sql_recipes=SQL_RECIPES,
        timings=[
            *timings,
            *((f"night {n} / {name}", t) for n, r in ((1, result), (2, night2)) for name, t in r["timings"]),
        ],
        tokenizer=AutoTokenizer.from_pretrained(model),  # the group viewer shows sampled tokens as text
    )
    report = write_report(workdir / "report.html", data)
    done("report", start)
    print_summary(data, report, lake, SQL_RECIPES)
    print_timings(timings)
    return {
        "report": str(report),
        "lake": str(lake),
        "rounds": result["rounds"],
        "adapter": result.get("adapter"),
        "evaluation": result.get("evaluation"),
        "published": published,
        "timings": timings,
        "pipeline_timings": result.get("timings", []),
        "captured": captured,
        "second_batch": second,
        "night2": night2,
    }


def headline(result: dict[str, Any]) -> Any:
    """The report's headline: a pipeline run's published version against its baseline."""
    from flows.report import Evaluation

    if not result.get("evaluation"):
        return None
    comparison = result["evaluation"]["comparison"]
    published = result.get("published") or {}
    return Evaluation(
        candidate=f"{published['name']}:v{published['version']}"
        if published
        else result["evaluation"]["candidate"],
        candidate_reward=comparison["candidate"]["mean"],
        baseline=result["evaluation"]["baseline"],
        baseline_reward=comparison["baseline"]["mean"],
        scenarios=comparison["paired_scenarios"],
        promoted=bool(published.get("promoted")),
    )
