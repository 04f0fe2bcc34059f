"""Fixtures: a seeded stand-in Langfuse server on loopback, configs pointing at it, CLI helpers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from flows.cli import app
from ingest.langfuse.config import LangfuseConfig
from store.lake import Lake
from tests.ingest.langfuse.agent_traces import seed_agent_trace
from tests.ingest.langfuse.standin import StandinLangfuse, iso, serve

# Traces start well before "now" so a default 30-minute overlap does not re-read them.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
CITIES = ("Paris", "Oslo", "Lima", "Cairo", "Perth", "Quito")


def trace_id(n: int) -> str:
    return f"{n:08x}" + "5b8efff798038103d269b633"  # 32 hex, distinct prefixes


def seed_project(standin: StandinLangfuse, n: int = 6) -> list[str]:
    """`n` agent traces a minute apart, plus one score of every data type."""
    ids = []
    for i in range(n):
        tid = trace_id(i)
        seed_agent_trace(
            standin,
            tid,
            T0 + timedelta(minutes=i),
            city=CITIES[i % len(CITIES)],
            user_id=f"u-{i % 2}",
            session_id=f"s-{i // 2}",
            environment="production" if i < n - 1 else "staging",
            tags=("prod", "weather") if i % 3 else ("weather",),
            name="weather-agent" if i != 1 else "other-agent",
        )
        ids.append(tid)
    at = lambda m: iso(T0 + timedelta(minutes=m))  # noqa: E731
    standin.add_score(
        id="s-num",
        name="helpfulness",
        dataType="NUMERIC",
        value=0.75,
        timestamp=at(10),
        comment="mostly helpful",
        subject={"kind": "trace", "id": ids[0]},
    )
    standin.add_score(
        id="s-bool",
        name="correct",
        dataType="BOOLEAN",
        value=False,
        timestamp=at(11),
        subject={"kind": "trace", "id": ids[0]},
        source="ANNOTATION",
    )
    standin.add_score(
        id="s-cat",
        name="verdict",
        dataType="CATEGORICAL",
        value="pass",
        timestamp=at(12),
        subject={"kind": "trace", "id": ids[1]},
        source="EVAL",
    )
    standin.add_score(
        id="s-cat2",
        name="tone",
        dataType="CATEGORICAL",
        value="sarcastic",
        timestamp=at(12.5),
        subject={"kind": "trace", "id": ids[1]},
    )
    standin.add_score(
        id="s-text",
        name="review",
        dataType="TEXT",
        value="Answer cites the tool.",
        timestamp=at(13),
        subject={"kind": "trace", "id": ids[2]},
        source="ANNOTATION",
    )
    gen1 = f"{ids[2][:12]}0002"
    standin.add_score(
        id="s-obs",
        name="tool_choice",
        dataType="NUMERIC",
        value=1,
        timestamp=at(14),
        subject={"kind": "observation", "id": gen1, "traceId": ids[2]},
    )
    standin.add_score(
        id="s-sess",
        name="session_quality",
        dataType="NUMERIC",
        value=3,
        timestamp=at(15),
        subject={"kind": "session", "id": "s-0"},
    )
    return ids


@pytest.fixture
def standin() -> StandinLangfuse:
    return StandinLangfuse()


@pytest.fixture
def langfuse_url(standin: StandinLangfuse) -> Iterator[str]:
    with serve(standin) as url:
        yield url


@pytest.fixture
def seeded(standin: StandinLangfuse) -> list[str]:
    return seed_project(standin)


def make_config(url: str, standin: StandinLangfuse, **overrides: Any) -> LangfuseConfig:
    values: dict[str, Any] = {
        "host": url,
        "public_key": standin.public_key,
        "secret_key": standin.secret_key,
        "observations_page_size": 5,
        "scores_page_size": 3,
        "checkpoint_pages": 1,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    values.update(overrides)
    return LangfuseConfig(**values)


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    """Run `trajlake ...` in-process; returns the click Result."""
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)


def sql(lake: Lake, query: str) -> list[dict[str, Any]]:
    """Rows of `trajlake sql --format json` (the user's view of the lake)."""
    result = cli("sql", query, "--lake", lake.root, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
