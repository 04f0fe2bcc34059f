"""The demo's questions, its scripted production LLM, its sizes and summary.json's pieces: pure, fast.

The tiny model's demo must keep its numbers, so its questions, the teacher's seeded mistakes on
them and its configuration are pinned; the mixed task (the real model's) must read back what it
asks, and the teacher misreads only word problems.
"""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import flows.demo.task
from flows.cli import app
from flows.demo.config import REAL_SIZES, SIZES, TINY_MODEL, sizes_for, write_demo_config
from flows.demo.summary import demo_summary, night_summary
from flows.demo.task import (
    ONE_OPERATION,
    SYSTEM_PROMPT,
    SYSTEM_PROMPTS,
    TWO_OPERATIONS,
    WORD_PROBLEMS,
    Question,
    calculator,
    make_questions,
    parse_question,
    system_prompt,
)
from flows.demo.teacher import reply
from store.catalog.connection import connect
from store.writer import write
from tests.store.helpers import make_traj


def test_the_tiny_demo_asks_what_it_always_asked() -> None:
    # the first questions of seed 0 before the mixed task existed: the tiny demo's numbers depend on them
    assert [q.text for q in make_questions(6)] == [
        "What is 12 - 0?",
        "What is 8 * 7?",
        "What is 12 - 7?",
        "What is 11 * 3?",
        "What is 16 + 4?",
        "What is 4 + 9?",
    ]
    assert make_questions(50, seed=3, task="simple") == make_questions(50, seed=3)


def test_mixed_questions_read_back_to_the_same_question() -> None:
    questions = make_questions(300, seed=0, task="mixed")
    assert all(parse_question(q.text) == q for q in questions)
    one_op, two_ops, words = questions[0::3], questions[1::3], questions[2::3]
    assert all(q.expression.count(" ") == 2 for q in one_op)
    assert all(q.expression.count(" ") == 4 for q in two_ops)
    assert all(q.wording and q.misread and q.text == q.wording for q in words)

    def drawn(templates: tuple, asked: list[Question]) -> int:
        return sum(any(_matches(wording, q.text) for q in asked) for wording, _, _ in templates)

    # users phrase questions in many ways: every phrasing is drawn in 100 questions of its kind
    assert drawn(ONE_OPERATION, one_op) == len(ONE_OPERATION) >= 10
    assert drawn(TWO_OPERATIONS, two_ops) == len(TWO_OPERATIONS) >= 4
    assert drawn(WORD_PROBLEMS, words) == len(WORD_PROBLEMS)
    # a misreading is a different expression, and almost always a different number
    misread = [q for q in questions if q.misread]
    assert len(misread) > len(words) and all(q.misread != q.expression for q in misread)
    assert sum(calculator(q.misread) != q.answer for q in words) >= 0.9 * len(words)


def _matches(wording: str, text: str) -> bool:
    """Whether `text` is `wording` with its fields filled."""
    import re

    pattern = re.sub(r"\\\{\w+\\\}", ".+", re.escape(wording))
    return re.fullmatch(pattern, text) is not None


def test_the_production_agent_ran_under_more_than_one_system_prompt() -> None:
    questions = make_questions(60, seed=0, task="mixed")
    prompts = [system_prompt(q, "mixed") for q in questions]
    assert set(prompts) == set(SYSTEM_PROMPTS) and prompts == [system_prompt(q, "mixed") for q in questions]
    assert {system_prompt(q) for q in make_questions(20)} == {SYSTEM_PROMPT}  # the tiny demo's one


def test_a_word_problem_means_its_expression() -> None:
    question = parse_question("A hall has 4 rows of 6 chairs and 3 extra chairs. How many chairs are there?")
    assert question is not None
    assert (question.expression, question.answer, question.misread) == ("4 * 6 + 3", "27", "4 * (6 + 3)")
    # the name is read once and must repeat where the wording repeats it
    assert parse_question("Ann has 5 apples and buys 2 more. How many apples does Ben have now?") is None
    assert parse_question("What is the weather in Paris?") is None


def test_unknown_task_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown demo task `hard`"):
        make_questions(3, task="hard")


def _call(question: Question, rng: random.Random, misread_rate: float) -> str:
    messages = [{"role": "user", "content": question.text}]
    message = reply(messages, rng, error_rate=0.15, misread_rate=misread_rate)["message"]
    return json.loads(message["tool_calls"][0]["function"]["arguments"])["expression"]


def test_the_teacher_misreads_word_problems_only() -> None:
    word = make_questions(3, task="mixed")[2]
    assert _call(word, random.Random(0), misread_rate=1.0) == word.misread
    assert _call(word, random.Random(0), misread_rate=0.0) == word.expression
    # a simple question draws nothing more: the tiny demo's seeded mistakes stay on the same questions
    simple = make_questions(1)[0]
    rngs = random.Random(7), random.Random(7)
    assert _call(simple, rngs[0], 1.0) == _call(simple, rngs[1], 0.0) == simple.expression
    assert rngs[0].random() == rngs[1].random()


def test_sizes_of_the_tiny_and_a_real_model(tmp_path: Path) -> None:
    assert sizes_for(TINY_MODEL) is SIZES
    assert sizes_for("smollm2-135m-instruct") is REAL_SIZES is sizes_for("/models/mine")
    with pytest.raises(ValueError, match="no demo model named"):
        sizes_for("")
    tiny = tomllib.loads(
        write_demo_config(tmp_path / "t.toml", tmp_path, "m", SIZES["full"], None).read_text()
    )
    # the tiny demo's training settings, as they were before the real model's sizes existed
    assert tiny["train"]["sft"] == {
        "num_train_epochs": 0.35,
        "learning_rate": 1e-2,
        "per_device_train_batch_size": 8,
        "seed": 0,
        "activation_checkpointing": False,
    }
    assert (tiny["train"]["grpo"]["learning_rate"], tiny["train"]["grpo"]["warmup_steps"]) == (1e-3, 5)
    assert tiny["scenarios"]["val_fraction"] == 0.25 and tiny["sampler"]["model"] == "m"
    real = REAL_SIZES["full"]
    config = write_demo_config(tmp_path / "r.toml", tmp_path, "smollm2-135m-instruct", real, None)
    toml = tomllib.loads(config.read_text())
    assert toml["sampler"]["model"] == "smollm2-135m-instruct"  # the run records keep the name
    assert toml["train"]["sft"]["max_steps"] == real.sft_max_steps > 0
    assert toml["train"]["sft"]["learning_rate"] == real.sft_learning_rate
    assert toml["train"]["grpo"]["learning_rate"] == real.grpo_learning_rate
    assert toml["train"]["grpo"]["activation_checkpointing"] is True
    assert toml["replay"]["sampling"]["max_tokens"] == real.max_new_tokens
    # GRPO samples questions SFT did not imitate; the tiny demo's rounds replay nearly all of them
    assert toml["pipeline"]["sft_excludes_replayed"] is True and toml["replay"]["group_size"] == 16
    assert tiny["pipeline"]["sft_excludes_replayed"] is False
    # night 2 imitates the adapter's well-rated traffic before GRPO; the tiny demo's is GRPO alone
    assert toml["pipeline"]["sft_on_production"] is True and tiny["pipeline"]["sft_on_production"] is False
    # the real model's smoke run (`--size small`) takes every path its full run takes
    for flag in ("sft_excludes_replayed", "sft_on_production", "evaluate_intermediate"):
        assert getattr(REAL_SIZES["small"], flag) == getattr(real, flag), flag


def test_a_night_that_learned_nothing_keeps_its_decision() -> None:
    run = SimpleNamespace(
        run_id="pipeline-2",
        start_adapter="calculator-agent:v1",
        training_steps=0,
        decision="nothing to learn",
    )
    night = night_summary(2, {"run": run, "rounds": [], "timings": [("assemble", 0.42)]})
    assert night["stages"] == [] and night["candidate_minus_baseline"] is None
    assert (night["decision"], night["start"], night["adapter"], night["promoted"]) == (
        "nothing to learn",
        "calculator-agent:v1",
        None,
        False,
    )
    assert night["wall_s"] == {"assemble": 0.4}
    summary = demo_summary(
        model="tiny",
        backend="transformers",
        task="simple",
        nights=[{"run": run, "rounds": [], "timings": []}],
        captured={"model": "production-llm-1", "agent_runs": 4, "correct": 3},
        second=None,
        timings=[("base model", 1.26)],
        total_s=2.0,
    )
    # without an evaluation row for the production LLM, its success is the batch's own count
    assert summary["production"] == {
        "before": 0.75,
        "before_policy": "production-llm-1",
        "before_n": 4,
        "n_before": 4,
        "after": None,
        "after_policy": None,
        "after_n": 0,
        "n_after": 0,
        "difference": None,
    }
    assert summary["final_minus_sft"] is None and summary["wall_s"] == {"total": 2.0, "base model": 1.3}


def test_demo_refuses_an_unknown_model_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--model", "smollm9", "--workdir", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert "unknown --model `smollm9`" in result.output and "smollm2-135m-instruct" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "d").exists()


def test_the_task_docstring_examples_run() -> None:
    import doctest

    result = doctest.testmod(flows.demo.task)
    assert result.attempted >= 3 and result.failed == 0


def test_scoring_production_traces_with_the_demo_reward_leaves_them_out(tmp_path: Path) -> None:
    """The demo's reward compares with a scenario's expected number: scoring production traces
    (which have none) writes no failed `no_expected` rows, every run again."""
    import json

    from typer.testing import CliRunner

    lake = tmp_path / "lake"
    write(str(lake), "trajectories", [make_traj(i) for i in range(5)])
    args = ["score", "--reward", "flows.demo.task:calculator_reward", "--lake", str(lake), "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.output)
    assert summary["rows_written"] == 0 and not summary.get("failures")
    assert connect(str(lake)).execute("SELECT count(*) FROM rewards").fetchone()[0] == 0
