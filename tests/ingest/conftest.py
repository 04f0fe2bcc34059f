"""Fixtures for ingest tests: a running collector on a free loopback port, and polling helpers."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner

from flows.cli import app as cli_app
from ingest.otlp.app import create_app
from ingest.otlp.collector import Collector
from ingest.otlp.config import CollectorConfig
from store.lake import Lake
from tests.ingest.fake_openai import serve_in_thread


@dataclass
class RunningCollector:
    url: str
    lake: Lake
    config: CollectorConfig
    runtime: Collector


# Collector processes a test started (`tests.reliability.test_durability.start`): killed after it.
STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def reap_collector_processes() -> Iterator[None]:
    """Never leave a collector process running after a test, however the test ended."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def make_config(lake: Lake, **overrides: Any) -> CollectorConfig:
    settings: dict[str, Any] = {
        "lake": lake.root,
        "flush_seconds": 0.2,
        "idle_timeout_s": 2.0,
        "assemble_interval_s": 0.1,
    }
    settings.update(overrides)
    return CollectorConfig(**settings)


@pytest.fixture
def start_collector(lake: Lake) -> Iterator[Callable[..., RunningCollector]]:
    """Start a collector with config overrides; stopped (flushed) at the end of the test."""
    stack: list[Any] = []

    def start(**overrides: Any) -> RunningCollector:
        config = make_config(lake, **overrides)
        app = create_app(config)
        context = serve_in_thread(app)
        url = context.__enter__()
        stack.append(context)
        return RunningCollector(url, lake, config, app.state.collector)

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


@pytest.fixture
def collector(start_collector: Callable[..., RunningCollector]) -> RunningCollector:
    return start_collector()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll until `predicate()` is truthy; fail with its last value otherwise."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)
        value = predicate()
    return value


def sql(lake: Lake, query: str) -> list[dict[str, Any]]:
    """Rows of `trajlake sql --format json` (the user's own view of the lake)."""
    result = CliRunner().invoke(cli_app, ["sql", query, "--lake", lake.root, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
