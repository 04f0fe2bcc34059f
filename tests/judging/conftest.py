"""Fixtures of the judging tests: a stand-in judge on loopback, a lake with groups."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from judging.config import JudgeConfig
from tests.judging.fake_judge import FakeJudge, JudgeServer


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    with JudgeServer(FakeJudge()) as server:
        yield server


@pytest.fixture
def judge_config(judge_server: JudgeServer) -> JudgeConfig:
    """A fast-retrying config pointed at the stand-in judge."""
    return JudgeConfig(
        model="stand-in-judge",
        base_url=judge_server.base_url,
        api_key="test",
        backoff_s=0.01,
        max_backoff_s=0.05,
        timeout_s=2.0,
        concurrency=4,
    )
