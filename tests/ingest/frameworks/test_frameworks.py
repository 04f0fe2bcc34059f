"""Real frameworks' telemetry (the recorded corpus, `tests/ingest/frameworks`) becomes one exact trajectory.

Each configuration's recorded OTLP/Langfuse bodies are replayed into a real collector on
loopback; the trajectory must match `expected/<config>.json`, which is derived from what
the scripted model saw and answered (never from trajlake's output): roles in order, the
tool call (name, arguments, id), the tool result the model saw with its call id, the final
answer, summed tokens, model, agent name, tool definitions with parameters, session and
user ids where the telemetry carries them, one model call counted per model request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ingest.frameworks.replay import compare, configurations, expected_of, replay

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


@pytest.mark.parametrize("name", configurations())
def test_recorded_framework_gives_its_exact_trajectory(name: str, tmp_path: Path) -> None:
    expected = expected_of(name)
    rows, rewards, refused = replay(name, tmp_path)
    assert not refused, f"the collector refused requests: {refused}"
    differences = compare(expected, rows, rewards)
    assert not differences, "\n".join(differences)


def test_the_corpus_covers_the_frameworks_the_issue_names() -> None:
    frameworks = {expected_of(name)["framework"] for name in configurations()}
    assert {
        "openai-agents",
        "pydantic-ai",
        "langgraph",
        "langfuse (Python SDK v5)",
        "smolagents",
        "strands-agents",
        "google-adk",
        "llama-index",
        "crewai",
        "vercel-ai-sdk (TypeScript)",
    } <= frameworks
