"""Evaluation statistics: intervals, paired differences, the learning-curve table, production reference rows."""

from __future__ import annotations

import pytest

from judging.evaluate import Measured, NothingScored, evaluate_policies
from judging.evaluation_stats import (
    bootstrap_ci,
    compare,
    evaluation_table,
    independent_difference,
    production_success,
    record_evaluation,
)
from store.catalog.connection import connect
from store.lake import Lake
from store.metrics import EvaluationTableRow
from store.writer import write
from tests.judging.helpers import T0, make_traj
from tests.store.helpers import run_metrics

SCENARIOS = [f"s{i:02d}" for i in range(40)]


def scores(values: list[float]) -> dict[str, float]:
    return dict(zip(SCENARIOS, values, strict=False))


# every scenario: base 0, SFT solves the even ones, GRPO the even ones and most odd ones
BASE = scores([0.0] * 40)
SFT = scores([1.0 if i % 2 == 0 else 0.0 for i in range(40)])
GRPO = scores([1.0 if i % 2 == 0 or i % 5 else 0.0 for i in range(40)])


def test_interval_brackets_the_mean_and_narrows_with_more_scenarios() -> None:
    low, high = bootstrap_ci([0.0, 1.0] * 5)
    wide = high - low
    low2, high2 = bootstrap_ci([0.0, 1.0] * 50)
    assert low < 0.5 < high and low2 < 0.5 < high2 and high2 - low2 < wide
    assert bootstrap_ci([0.3]) == (0.3, 0.3)


def test_table_pairs_each_stage_with_the_previous_one_and_the_references() -> None:
    rows = evaluation_table(
        [("base", "m", BASE), ("sft", "m+sft", SFT), ("grpo-1", "m+g1", GRPO)], references=("base", "sft")
    )
    assert [r.stage for r in rows] == ["base", "sft", "grpo-1"] and all(r.kind == "val" for r in rows)
    assert [r.mean for r in rows] == pytest.approx([0.0, 0.5, 0.9])
    assert rows[0].differences == []
    assert [d.against for d in rows[2].differences] == ["previous", "base", "sft"]
    lift = rows[2].difference("sft")
    assert lift.mean == pytest.approx(0.4) and lift.paired_scenarios == 40
    assert 0 < lift.ci[0] < 0.4 < lift.ci[1]  # a consistent lift: the interval excludes 0
    previous = rows[2].difference("previous")
    assert (previous.mean, previous.ci) == (lift.mean, lift.ci)  # the previous stage is SFT here
    assert rows[1].difference("base").mean == pytest.approx(0.5)
    # no pairing, no difference: the same scenarios shuffled between policies still pair by id
    shuffled = dict(reversed(list(GRPO.items())))
    again = evaluation_table([("sft", "a", SFT), ("grpo", "b", shuffled)], references=("sft",))
    assert again[1].difference("sft").mean == pytest.approx(0.4)


def test_noise_gives_an_interval_around_zero() -> None:
    flip = scores([float(i % 2) for i in range(40)])
    flop = scores([float((i + 1) % 2) for i in range(40)])
    (_, row) = evaluation_table([("a", "a", flip), ("b", "b", flop)])
    assert row.difference("previous").mean == pytest.approx(0.0)
    low, high = row.difference("previous").ci
    assert low < 0 < high  # unpaired means are equal; every paired difference is +-1: no evidence


def test_production_success_per_policy_from_feedback(lake: Lake) -> None:
    rows = [make_traj(f"p{i}", "x", source="otel", policy="prod-llm") for i in range(10)]
    rows += [make_traj(f"a{i}", "x", source="otel", policy="agent-v1") for i in range(4)]
    rows += [make_traj(f"r{i}", "x", source="replay", policy="agent-v1") for i in range(4)]  # not production
    write(lake, "trajectories", rows)
    feedback = [(f"p{i}", float(i < 8)) for i in range(10)] + [(f"a{i}", 1.0) for i in range(4)]
    feedback += [(f"r{i}", 0.0) for i in range(4)]
    write(
        lake,
        "rewards",
        [
            {"trajectory_id": t, "name": "user_feedback", "scorer": "user", "value": v, "scored_at": T0}
            for t, v in feedback
        ],
    )
    found = production_success(lake, "user_feedback")
    assert [(r.policy, r.n, r.mean) for r in found] == [("prod-llm", 10, 0.8), ("agent-v1", 4, 1.0)]
    assert all(r.kind == "production" and r.ci[0] <= r.mean <= r.ci[1] for r in found)
    assert production_success(lake, "no_such_reward") == []


def test_record_writes_the_comparison_then_the_table(lake: Lake) -> None:
    rows = evaluation_table([("base", "m", BASE), ("sft", "m+sft", SFT)], references=("base",))
    comparison = compare("exact_match", ("m+sft", SFT), ("m", BASE))
    run_id = record_evaluation(lake, comparison, rows, adapter="agent")
    metrics = [m for _, _, m in run_metrics(lake, run_id)]
    assert [m["role"] for m in metrics] == ["candidate", "baseline", "table", "table"]
    assert metrics[3]["stage"] == "sft" and metrics[3]["diff_base"] == pytest.approx(0.5)
    assert metrics[3]["diff_base_ci_low"] > 0 and metrics[3]["adapter"] == "agent"


def test_a_policys_interval_does_not_depend_on_the_order_its_scores_were_read() -> None:
    """The lake returns scenario scores in no fixed order; the same scores must report the same interval."""
    graded = {s: (i * 7 % 40) ** 2 / 1600 for i, s in enumerate(SCENARIOS)}
    rotated = dict(list(graded.items())[17:] + list(graded.items())[:17])
    (row,) = evaluation_table([("sft", "m+a", graded)])
    (again,) = evaluation_table([("sft", "m+a", rotated)])
    assert row.ci == again.ci


# --- the procedure ---------------------------------------------------------------------------------


def test_the_procedure_measures_each_policy_once_and_always_shows_the_baseline(lake: Lake) -> None:
    measured: list[str | None] = []
    by_path = {None: BASE, "sft/adapter": SFT, "grpo-1/adapter": GRPO, "prod/adapter": SFT}

    def measure(path: str | None) -> Measured:
        measured.append(path)
        return Measured(path or "model", "exact_match", by_path[path])

    stages = [("base", None), ("sft", "sft/adapter"), ("grpo-1", "grpo-1/adapter")]
    found = evaluate_policies(
        lake,
        measure,
        candidate="grpo-1/adapter",
        baseline=("calc:v3", "prod/adapter"),
        stages=stages,
        references=("base", "sft"),
        adapter="calc",
    )
    assert measured == [None, "sft/adapter", "grpo-1/adapter", "prod/adapter"]  # once each
    assert [row.stage for row in found.table] == ["base", "sft", "grpo-1", "calc:v3"]  # baseline joins
    assert found.comparison.candidate.policy == "grpo-1/adapter"
    assert found.comparison.baseline.policy == "prod/adapter"
    assert found.comparison.difference == pytest.approx(0.4)  # GRPO solves 8 of the 20 odd ones more
    assert found.table[2].difference("sft").mean == pytest.approx(0.4)
    with connect(lake, read_only=True) as con:
        steps = con.execute(f"SELECT count(*) FROM runs WHERE run_id = '{found.run_id}'").fetchone()[0]
    assert steps == 2 + 4  # candidate, baseline, then the table


def test_nothing_scored_is_refused_before_anything_is_recorded(lake: Lake) -> None:
    def measure(path: str | None) -> Measured:
        return Measured(path or "model", "exact_match", {} if path else BASE)

    with pytest.raises(NothingScored, match="no val scenario was scored with `exact_match`"):
        evaluate_policies(lake, measure, candidate="a/adapter", baseline=("base", None))
    assert not lake.has_table("runs")


def test_the_publish_gate_compares_the_candidate_with_the_incumbent(lake: Lake) -> None:
    by_path = {"prod/adapter": SFT, "new/adapter": GRPO}
    found = evaluate_policies(
        lake,
        lambda path: Measured(str(path), "exact_match", by_path[str(path)]),
        candidate="new/adapter",
        baseline=("calc:v3", "prod/adapter"),
    )
    assert [row.stage for row in found.table] == ["calc:v3", "candidate"]  # no stages: the gate's two rows
    assert found.table[1].difference("calc:v3").mean == pytest.approx(0.4)  # paired with the baseline
    assert found.comparison.better and found.baseline == "calc:v3"


def test_greedy_scores_sit_beside_the_sampled_ones_and_reach_the_runs_table(lake: Lake) -> None:
    sampled = {"a": 0.5, "b": 0.25}
    greedy = {"a": 1.0, "b": 0.0}  # one sample per scenario at T=0: every score is 0 or 1
    (row,) = evaluation_table([("sft", "m+sft", sampled)], greedy={"sft": greedy})
    assert (row.mean, row.greedy.mean, row.greedy.scenarios) == (0.375, 0.5, 2)
    comparison = compare("exact_match", ("m+sft", sampled), ("m", {"a": 0.0, "b": 0.0}))
    run_id = record_evaluation(lake, comparison, [row])
    metrics = {step: m for step, _, m in run_metrics(lake, run_id)}[2]
    assert EvaluationTableRow.from_metrics(metrics).greedy == (0.5, *row.greedy.ci, 2)
    # a stage measured without greedy keeps none
    assert evaluation_table([("base", "m", sampled)])[0].greedy is None
    mean, (low, high) = independent_difference([1.0] * 90 + [0.0] * 10, [1.0] * 50 + [0.0] * 50)
    assert mean == pytest.approx(0.4) and low < 0.4 < high and low > 0
