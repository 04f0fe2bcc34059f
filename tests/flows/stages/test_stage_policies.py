"""Which policies a pipeline run's evaluation measures: every stage, or only its ends."""

from __future__ import annotations

from flows.stages.evaluate import stage_policies

ROUNDS = ["/w/grpo-1", "/w/grpo-2", "/w/grpo-3"]


def test_every_stage_is_the_learning_curve_from_the_base_model() -> None:
    assert stage_policies("/w/sft", ROUNDS) == [
        ("base", None),
        ("sft", "/w/sft"),
        ("grpo-1", "/w/grpo-1"),
        ("grpo-2", "/w/grpo-2"),
        ("grpo-3", "/w/grpo-3"),
    ]
    assert stage_policies(None, ROUNDS[:1], ("agent:v1", "/r/v1")) == [
        ("base", None),
        ("agent:v1", "/r/v1"),
        ("grpo-1", "/w/grpo-1"),
    ]


def test_the_ends_are_where_the_run_started_sft_and_the_candidate_under_its_round() -> None:
    assert stage_policies("/w/sft", ROUNDS, intermediate=False) == [
        ("base", None),
        ("sft", "/w/sft"),
        ("grpo-3", "/w/grpo-3"),  # the last round keeps its number: the curve says how far it came
    ]
    # a run continuing an adapter starts from it: the base model was measured by the run that trained it
    assert stage_policies(None, ROUNDS[:2], ("agent:v1", "/r/v1"), intermediate=False) == [
        ("agent:v1", "/r/v1"),
        ("grpo-2", "/w/grpo-2"),
    ]
    assert stage_policies("/w/sft", [], intermediate=False) == [("base", None), ("sft", "/w/sft")]
