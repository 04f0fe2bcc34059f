"""The demo's production batch served by a model: the same seeded batch gets the same answers
however the server batched its calls, so a demo's second night starts from the same data on
every machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.demo.base_model import pretrain_base_model
from flows.demo.capture import capture_production_traces
from flows.sampler_server import sampler_app
from store.catalog.connection import connect
from store.lake import Lake
from training.replay.samplers import SamplingParams

pytestmark = pytest.mark.slow  # a served model answers two batches: over 5 s

QUESTIONS = 12
ANSWERS = """
    SELECT t.trajectory_id, m.content AS question, t.final_output, to_json(t.messages) AS messages
    FROM trajectories t JOIN messages m USING (trajectory_id)
    WHERE t.source = 'otel' AND m.role = 'user'
"""


def conversation(messages: str) -> tuple[tuple[Any, ...], ...]:
    """What was said: each message's role, text and tool calls (their ids are the server's, random)."""
    return tuple(
        (m["role"], m["content"], tuple((c["name"], c["arguments"]) for c in m["tool_calls"]))
        for m in json.loads(messages)
    )


def served_batch(lake: Path, model: Path, concurrency: int) -> list[tuple[Any, ...]]:
    app, sampler, served = sampler_app(str(model), defaults=SamplingParams(temperature=1.0, max_tokens=24))
    with sampler:
        stats = capture_production_traces(
            lake, QUESTIONS, seed=1, llm_app=app, model=served, concurrency=concurrency
        )
    assert stats["agent_runs"] == QUESTIONS
    rows = connect(Lake(str(lake))).sql(ANSWERS).fetchall()
    return sorted((t, question, final, conversation(messages)) for t, question, final, messages in rows)


def test_a_seeded_batch_gets_the_same_answers_whatever_the_batching(tmp_path: Path, tiny_model: Path) -> None:
    """Two agents at a time (calls decoded in pairs) and twelve at once (calls batched together as
    they arrive) sample the same conversations at temperature 1, under the same trace ids (so
    the same trajectory ids and train/val split): each run sends its own seed and draws its ids
    from a generator of its own."""
    model = pretrain_base_model(tiny_model, tmp_path / "model")
    pairs = served_batch(tmp_path / "pairs", model, concurrency=2)
    together = served_batch(tmp_path / "together", model, concurrency=QUESTIONS)
    assert len(pairs) == QUESTIONS and len({row[3] for row in pairs}) > 1
    assert together == pairs
