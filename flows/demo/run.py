"""`trajlake demo`: production traces in, a better published adapter out, on this machine.

The story, each step a real part:

1. build the tiny local model (the policy we will improve): its tokenizer is built here, its
   pretrained weights ship with trajlake (`flows/demo/base_model.py`); or, with `--model`, a
   real base model (`smollm2-135m-instruct`, fetched once) on the real-model sizes;
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
5. run the pipeline a second night, as the schedule would: it continues the adapter in
   production on the traffic it served;
6. write the HTML report, print SQL to explore the lake, and write `summary.json` (every
   number printed, machine-readable: `flows.demo.summary.demo_summary`).

The recipe, measured on one CPU core in the learn branch's research: a short SFT warm start
(~1/3 epoch: it teaches the answer format and gives every behaviour the task needs, negative
numbers included, some probability) and GRPO rounds on fresh slices of 64 train scenarios x 8
samples at T = 0.8, all-equal groups skipped, warmup 5 steps (each round's optimiser starts
fresh), on-policy groups only. A longer SFT alone gets about as far (the production traces it
imitates are filtered to correct ones); the warm start leaves RL the work, as the demo shows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from flows.demo.capture import capture_production_traces
from flows.demo.config import (  # noqa: F401 (re-exported: the demo's tests and callers import them here)
    REAL_SIZES,
    SIZES,
    SQL_RECIPES,
    TINY_MODEL,
    DemoSize,
    sizes_for,
    write_demo_config,
)
from flows.demo.serving import demo_vllm_server, serve_second_batch
from flows.demo.summary import demo_summary, print_learning, print_summary, print_timings, write_summary
from training.models.known import KNOWN_MODELS, fetch_model

console = Console()


class Steps:
    """The demo's steps: each announced, timed and kept in order (`timings`)."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.timings: list[tuple[str, float]] = []

    def step(self, name: str) -> float:
        console.rule(f"[bold]{name}")
        return time.perf_counter()

    def done(self, name: str, started: float) -> None:
        self.timings.append((name, time.perf_counter() - started))
        console.print(f"[dim]{name}: {self.timings[-1][1]:.1f} s[/]")


def run_demo(
    workdir: Path,
    size: str = "full",
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    backend: str = "transformers",
    model: str = TINY_MODEL,
) -> dict[str, Any]:
    """Run every stage on `workdir` and return what was measured (also written to the report and
    to `<workdir>/summary.json`).

    `model`: `tiny` (the default: built here, its weights shipped) or a real base model, a known
    name (`smollm2-135m-instruct`: fetched and converted once when missing) or a model folder
    or hub id; a real model gets the real-model sizes and the mixed task (`flows.demo.config`).
    `backend="vllm"` starts a real vLLM server of the base model (vLLM must be importable:
    `.ci/vllm-env`): replay and evaluation sample from it, and the published adapter is
    hot-loaded into it to serve the second production batch.
    """
    from contextlib import ExitStack

    sizes = sizes_for(model)
    if size not in sizes:
        raise ValueError(f"unknown demo size `{size}`; choose from {', '.join(sizes)}")
    spec = sizes[size]
    workdir = workdir.absolute()
    steps = Steps()
    stack = ExitStack()  # the vLLM server, where there is one: stopped however the demo ends
    try:
        if model == TINY_MODEL:
            from flows.demo.base_model import pretrain_base_model
            from training.tiny import build_tiny_model

            start = steps.step("1/6 the tiny base model (tokenizer built here, pretrained weights shipped)")
            folder = pretrain_base_model(build_tiny_model(workdir / "tiny"), workdir / "model")
            name = str(folder)
        else:
            start = steps.step(f"1/6 the base model: {model}")
            folder, name = _real_model(model), model
            console.print(f"{model}: {folder}")
        steps.done("base model", start)
        vllm_url = None
        if backend == "vllm":
            start = steps.step("the base model on a vLLM server (replay, evaluation, serving)")
            vllm_url = stack.enter_context(demo_vllm_server(folder, workdir, spec.max_new_tokens))
            steps.done("vLLM server start", start)
            name = str(folder)  # the server serves the base model under its folder's path
        result = _run_demo(workdir, spec, name, folder, steps, judge_base_url, judge_model, vllm_url)
    finally:
        stack.close()

    summary = demo_summary(
        model=model,
        backend=backend,
        task=spec.task,
        nights=[result["night1"], result["night2"]],
        captured=result["captured"],
        second=result["second_batch"],
        timings=steps.timings,
        total_s=time.perf_counter() - steps.began,
    )
    result["summary"] = str(write_summary(workdir / "summary.json", summary))
    console.print(f"Summary: [bold]{result['summary']}[/]")
    return result


def _real_model(model: str) -> Path:
    """A real base model's folder: a known name fetched (and converted) once, else the folder or hub id."""
    if model in KNOWN_MODELS:
        return fetch_model(model)
    return Path(model)


def _run_demo(
    workdir: Path,
    spec: DemoSize,
    model: str,
    folder: Path,
    steps: Steps,
    judge_base_url: str | None,
    judge_model: str | None,
    vllm_url: str | None,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from flows.prefect_flows import run_pipeline
    from flows.report import report_data, write_report

    lake = workdir / "lake"
    step, done, timings = steps.step, steps.done, steps.timings

    start = step("2/6 production agent -> OpenTelemetry -> trajlake collect -> lake")
    captured = capture_production_traces(lake, spec.questions, task=spec.task)
    done("production batch 1 (production LLM)", start)
    console.print(
        f"agent runs: {captured['agent_runs']}, correct answers: {captured['correct']}, "
        f"production trajectories in the lake: {captured.get('trajectories', '?')}"
    )

    start = step("3/6 Prefect pipeline, night 1: scenarios, SFT, replay/score/GRPO rounds, evaluate, publish")
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
        serve_second_batch(
            lake,
            model,
            published,
            spec.served_questions or spec.questions,
            spec.max_new_tokens,
            vllm_url=vllm_url,
            task=spec.task,
        )
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
        tokenizer=AutoTokenizer.from_pretrained(folder),  # the group viewer shows sampled tokens as text
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
        "night1": result,
        "night2": night2,
    }


def headline(result: dict[str, Any]) -> Any:
    """The report's headline: a pipeline run's published version against its baseline."""
    from flows.report import PublishedComparison

    if not result.get("evaluation"):
        return None
    comparison = result["evaluation"]["comparison"]
    published = result.get("published") or {}
    return PublishedComparison(
        candidate=f"{published['name']}:v{published['version']}"
        if published
        else result["evaluation"]["candidate"],
        candidate_reward=comparison["candidate"]["mean"],
        baseline=result["evaluation"]["baseline"],
        baseline_reward=comparison["baseline"]["mean"],
        scenarios=comparison["paired_scenarios"],
        promoted=bool(published.get("promoted")),
    )
