"""Assembly of feedback: evaluation events, evaluation log records and OpenInference annotations
-> rows of `rewards`, non-finite values stored without a number.
"""

from __future__ import annotations

import json
from datetime import timedelta

from ingest.assembly import assemble
from tests.ingest.span_rows import T0, TRACE, agent, chat, get_span, spans_table, text


def test_feedback_events_logs_and_annotations_become_rewards() -> None:
    evaluation = {
        "name": "gen_ai.evaluation.result",
        "time": int((T0 + timedelta(seconds=9)).timestamp() * 1e9),
        "attributes": {
            "gen_ai.evaluation.name": "relevance",
            "gen_ai.evaluation.score.value": 0.8,
            "gen_ai.evaluation.explanation": "on topic",
        },
    }
    log_row = get_span(
        "9" * 16,
        "b" * 16,
        {"log.body": {"gen_ai.evaluation.name": "thumbs", "gen_ai.evaluation.score.label": "up"}},
        8,
        name="gen_ai.evaluation.result",
        kind="LOG",
    )
    rows = [
        agent("a" * 16, None, "bot", 0),
        {
            **chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
            "events": json.dumps([evaluation]),
        },
        get_span(
            "c" * 16,
            "a" * 16,
            {
                "openinference.span.kind": "EVALUATOR",
                "annotation.name": "correct",
                "annotation.score": 1,
                "annotation.explanation": "matches",
            },
            2,
        ),
        log_row,
    ]
    rewards = {r["name"]: r for r in assemble(spans_table(rows)).rewards.to_pylist()}
    assert set(rewards) == {"relevance", "thumbs", "correct"}
    assert all(r["trajectory_id"] == TRACE for r in rewards.values())
    assert (rewards["relevance"]["value"], rewards["relevance"]["explanation"]) == (0.8, "on topic")
    assert rewards["relevance"]["scorer"] == "otel:gen_ai.evaluation.result"
    assert rewards["thumbs"]["value"] is None and json.loads(rewards["thumbs"]["metadata"])["label"] == "up"
    assert (rewards["correct"]["value"], rewards["correct"]["scorer"]) == (1.0, "openinference:annotation")


def test_non_finite_feedback_values_are_stored_without_a_number() -> None:
    evaluation = {
        "name": "gen_ai.evaluation.result",
        "time": int((T0 + timedelta(seconds=9)).timestamp() * 1e9),
        "attributes": {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": "NaN"},
    }
    rows = [
        agent("a" * 16, None, "bot", 0),
        {
            **chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
            "events": json.dumps([evaluation]),
        },
    ]
    (reward,) = assemble(spans_table(rows)).rewards.to_pylist()
    assert reward["name"] == "relevance" and reward["value"] is None  # NaN would poison every mean
    assert json.loads(reward["metadata"])["raw_value"] == "NaN"
