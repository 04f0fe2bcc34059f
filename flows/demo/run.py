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
   trajectories, SFT on them, rounds of group replay -> scoring -> GRPO, evaluation of
   the adapter against the base model on val scenarios, publishing with lineage;
4. write the HTML report and print SQL to explore the lake.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from flows.demo.capture import capture_production_traces

console = Console()


@dataclass(frozen=True)
class DemoSize:
    questions: int  # production agent runs
    train_scenarios: int  # scenarios replayed per round
    rounds: int  # replay -> score -> GRPO rounds
    group_size: int
    sft_epochs: float
    grpo_epochs: float
    max_new_tokens: int


SIZES = {
    "full": DemoSize(
        questions=300,
        train_scenarios=32,
        rounds=2,
        group_size=4,
        sft_epochs=6.0,
        grpo_epochs=1.0,
        max_new_tokens=40,
    ),
    "small": DemoSize(
        questions=24,
        train_scenarios=6,
        rounds=1,
        group_size=2,
        sft_epochs=1.0,
        grpo_epochs=1.0,
        max_new_tokens=24,
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
    path: Path, lake: Path, model: Path, size: DemoSize, judge: tuple[str, str] | None
) -> Path:
    """The demo's `trajlake.toml` (also a worked example of the configuration)."""
    well_rated = (
        "SELECT trajectory_id FROM trajectories WHERE source = 'otel' AND has_content AND trajectory_id IN "
        "(SELECT trajectory_id FROM latest_rewards WHERE name = 'user_feedback' AND value >= 1)"
    )
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
replay = "SELECT scenario_id FROM scenarios WHERE split = 'train' ORDER BY hash(scenario_id) LIMIT {size.train_scenarios}"
sft = "{well_rated}"

[scenarios]
val_fraction = 0.25

[sampler]
model = "{model}"

[replay]
group_size = {size.group_size}
temperature = 0.8
max_tokens = {size.max_new_tokens}
max_turns = 3
concurrency = 2
seed = 0

[tools]
tool = ["flows.demo.task:calculator"]
recorded = false

[score]
rewards = {json.dumps(rewards)}
reward = "calculator"
{judge_table}
[train.sft]
num_train_epochs = {size.sft_epochs}
learning_rate = 1e-2
per_device_train_batch_size = 8
seed = 0
gradient_checkpointing = false

[train.grpo]
loss_type = "dapo"
beta = 0.0
learning_rate = 1e-3
num_train_epochs = {size.grpo_epochs}
per_device_train_batch_size = 8
seed = 0
gradient_checkpointing = false

[publish]
name = "calculator-agent"

[pipeline]
rounds = {size.rounds}
max_workers = 2
"""
    )
    return path


def run_demo(
    workdir: Path,
    size: str = "full",
    judge_base_url: str | None = None,
    judge_model: str | None = None,
) -> dict[str, Any]:
    """Run every stage on `workdir` and return what was measured (also written to the report)."""
    from flows.demo.base_model import pretrain_base_model
    from flows.prefect_flows import run_pipeline
    from flows.report import Evaluation, report_data, write_report
    from training.tiny import build_tiny_model

    spec = SIZES[size]
    workdir = workdir.absolute()
    lake = workdir / "lake"
    timings: list[tuple[str, float]] = []

    def step(name: str) -> Any:
        console.rule(f"[bold]{name}")
        return time.perf_counter()

    start = step("1/4 the tiny base model (tokenizer built here, pretrained weights shipped)")
    model = pretrain_base_model(build_tiny_model(workdir / "tiny"), workdir / "model")
    timings.append(("build tiny base model", time.perf_counter() - start))

    start = step("2/4 production agent -> OpenTelemetry -> trajlake collect -> lake")
    captured = capture_production_traces(lake, spec.questions)
    timings.append(("capture production traces", time.perf_counter() - start))
    console.print(
        f"agent runs: {captured['agent_runs']}, correct answers: {captured['correct']}, "
        f"trajectories in the lake: {captured.get('trajectories', '?')}"
    )

    start = step("3/4 Prefect pipeline: scenarios, SFT, replay/score/GRPO rounds, evaluate, publish")
    judge = (judge_base_url, judge_model) if judge_base_url and judge_model else None
    config_file = write_demo_config(workdir / "trajlake.toml", lake, model, spec, judge)
    result = run_pipeline(str(config_file), str(lake), rounds=spec.rounds)
    timings.append(("pipeline flow", time.perf_counter() - start))

    start = step("4/4 report")
    evaluation = None
    if result.get("evaluation"):
        comparison = result["evaluation"]["comparison"]
        published = result.get("published") or {}
        evaluation = Evaluation(
            candidate=f"{published['name']}:v{published['version']}"
            if published
            else result["evaluation"]["candidate"],
            candidate_reward=comparison["candidate"]["mean"],
            baseline=result["evaluation"]["baseline"],
            baseline_reward=comparison["baseline"]["mean"],
            scenarios=comparison["paired_scenarios"],
            promoted=bool(published.get("promoted")),
        )
    data = report_data(
        lake,
        "calculator",
        title="trajlake demo: calculator agent",
        evaluation=evaluation,
        adapter_name="calculator-agent",
        sql_recipes=SQL_RECIPES,
        timings=timings,
    )
    report = write_report(workdir / "report.html", data)
    _print_summary(data, report, lake)
    return {
        "report": str(report),
        "lake": str(lake),
        "rounds": result["rounds"],
        "adapter": result.get("adapter"),
        "evaluation": result.get("evaluation"),
        "published": result.get("published"),
        "timings": timings,
        "captured": captured,
    }


def _print_summary(data: Any, report: Path, lake: Path) -> None:
    table = Table("round", "policy", "trajectories", "mean reward", "std", title="Reward per round")
    for r in data.rounds:
        table.add_row(str(r.round), r.policy, str(r.trajectories), f"{r.mean:.3f}", f"{r.std:.3f}")
    console.print(table)
    if data.evaluation is not None:
        ev = data.evaluation
        console.print(
            f"[bold]val reward[/]: {ev.candidate} {ev.candidate_reward:.3f} vs {ev.baseline} "
            f"{ev.baseline_reward:.3f} on {ev.scenarios} scenarios ({'promoted' if ev.promoted else 'not promoted'})"
        )
    console.print(f"\nReport: [bold]{report}[/]\nExplore the lake:")
    for what, sql in SQL_RECIPES:
        console.print(f'  # {what}\n  trajlake sql --lake {lake} "{sql}"')
