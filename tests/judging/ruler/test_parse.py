"""The tolerant parser and the strict validation of judge answers."""

from __future__ import annotations

import json

import pytest

from judging.errors import JudgeCallError
from judging.ruler.judge import response_format
from judging.ruler.parse import parse_verdicts

LABELS = ["t1", "t2", "t3"]


def answer(*entries: tuple) -> str:
    return json.dumps({"scores": [{"trajectory_id": i, "explanation": e, "score": s} for i, s, e in entries]})


@pytest.mark.parametrize(
    "text",
    [
        answer(("t3", 0.1, "c"), ("t1", 0.9, "a"), ("t2", 0.5, "b")),  # any order: matched by id
        "Here you go:\n```json\n" + answer(("t1", 0.9, "a"), ("t2", 0.5, "b"), ("t3", 0.1, "c")) + "\n```",
        'Scores: [{"id": "t1", "score": "0.9", "reason": "a"}, {"id": "t2", "score": 0.5, "reason": "b"},'
        ' {"id": "t3", "score": 0.1, "reason": "c"}] -- done',  # bare list in prose, synonyms, numeric string
        '{"t1": {"score": 0.9, "explanation": "a"}, "t2": {"score": 0.5, "explanation": "b"},'
        ' "t3": {"score": 0.1, "explanation": "c"}}',  # mapping by id
        '{"scores": [{"trajectory_id": "1", "score": 0.9, "explanation": "a"}, {"trajectory_id": 2, "score": 0.5,'
        ' "explanation": "b"}, {"trajectory_id": "t3", "score": 0.1, "explanation": "c"}]}',  # ids without the t
    ],
)
def test_tolerant_forms_parse_to_the_same_verdicts(text):
    assert parse_verdicts(text, LABELS) == {"t1": (0.9, "a"), "t2": (0.5, "b"), "t3": (0.1, "c")}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty_answer"),
        ("the first one is best", "invalid_json"),
        ('{"scores": "good"}', "invalid_json"),
        (answer(("t1", 0.9, ""), ("t2", 0.5, "")), "missing_ids"),
        (answer(("t1", 0.9, ""), ("t2", 0.5, ""), ("t3", 0.1, ""), ("t4", 0.3, "")), "unknown_ids"),
        (answer(("t1", 0.9, ""), ("t1", 0.4, ""), ("t2", 0.5, ""), ("t3", 0.1, "")), "duplicate_ids"),
        (answer(("t1", 1.5, ""), ("t2", 0.5, ""), ("t3", 0.1, "")), "score_out_of_range"),
        (answer(("t1", -0.1, ""), ("t2", 0.5, ""), ("t3", 0.1, "")), "score_out_of_range"),
        (answer(("t1", "high", ""), ("t2", 0.5, ""), ("t3", 0.1, "")), "invalid_score"),
        (answer(("t1", None, ""), ("t2", 0.5, ""), ("t3", 0.1, "")), "invalid_score"),
    ],
)
def test_invalid_answers_are_retryable_errors_with_a_reason(text, reason):
    with pytest.raises(JudgeCallError) as info:
        parse_verdicts(text, LABELS)
    assert info.value.reason == reason
    assert info.value.retryable


def test_the_schema_names_each_label_once() -> None:
    schema = response_format("json_schema", ["t1", "t2", "t3"])["json_schema"]["schema"]  # type: ignore[index]
    scores = schema["properties"]["scores"]
    assert scores["required"] == ["t1", "t2", "t3"] and scores["additionalProperties"] is False
    assert scores["properties"]["t2"]["properties"]["score"] == {"type": "number", "minimum": 0, "maximum": 1}
