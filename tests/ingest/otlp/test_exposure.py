"""Authentication is never turned off by accident, and an open collector says so.

An empty `--token ''` or `TRAJLAKE_COLLECTOR_TOKEN=''` (and empty Langfuse keys) used to
read as "no authentication"; they are refused with a one-line error (exit 2). A collector
bound beyond loopback without a token warns in its log and on `/health`. `/health` is
open (probes carry no credentials), so with credentials configured it leaves out the
lake's path.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from flows.background import free_port
from ingest.errors import CollectorSettingError
from ingest.otlp.config import CollectorConfig, is_loopback

ROOT = Path(__file__).resolve().parents[3]
OPEN = "anyone who can reach the port can write to the lake"


def collect(*args: str, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """`trajlake collect` as a process (one that wrongly starts is stopped after 30 s)."""
    command = [sys.executable, "-m", "flows.cli", "collect", "--port", str(free_port()), *args]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLAKE_")}
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env={**environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            _, errors = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            return None, "started: " + process.communicate()[1]
    return process.returncode, errors


@pytest.mark.slow  # a `trajlake collect` process per case (~2 s each)
@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--token", ""), None),
        (("--token", "  "), None),
        ((), {"TRAJLAKE_COLLECTOR_TOKEN": ""}),
        ((), {"TRAJLAKE_LANGFUSE_PUBLIC_KEY": "", "TRAJLAKE_LANGFUSE_SECRET_KEY": ""}),
        (("--langfuse-public-key", "", "--langfuse-secret-key", ""), None),
    ],
)
def test_an_empty_credential_is_refused_in_one_line(
    args: tuple[str, ...], env: dict[str, str] | None, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    code, output = collect(*args, "--lake", str(tmp_path / "lake"), env=env)
    assert code == 2, output
    assert output.startswith("error: ") and output.count("\n") == 1, output
    assert "empty" in output and "authentication off" in output
    assert not (tmp_path / "lake").exists()  # refused before anything started


def test_a_token_with_surrounding_whitespace_is_refused_without_echoing_it() -> None:
    with pytest.raises(CollectorSettingError, match="leading or trailing whitespace") as refused:
        CollectorConfig(bearer_token="s3cret\n")
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_hosts_are_not_exposed(host: str) -> None:
    assert is_loopback(host) and CollectorConfig(host=host).exposure_warning is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "collector.internal"])
def test_a_collector_beyond_loopback_without_a_token_is_exposed(host: str) -> None:
    warning = CollectorConfig(host=host).exposure_warning
    assert warning is not None and OPEN in warning and host in warning
    assert CollectorConfig(host=host, bearer_token="t").exposure_warning is None
    # Langfuse keys guard /api/public/* only: /v1/* stays open without a token.
    keys = CollectorConfig(host=host, langfuse_public_key="pk", langfuse_secret_key="sk")
    assert keys.exposure_warning is not None


def test_an_exposed_collector_warns_in_its_log_and_on_health(start_collector, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING)
    running = start_collector(host="0.0.0.0")  # the fixture itself binds 127.0.0.1 only
    health = httpx.get(f"{running.url}/health").json()
    assert health["auth"] is False and len(health["warnings"]) == 1 and OPEN in health["warnings"][0]
    assert any(OPEN in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_a_loopback_collector_has_no_warning_and_shows_its_lake(collector) -> None:  # type: ignore[no-untyped-def]
    health = httpx.get(f"{collector.url}/health").json()
    assert health["warnings"] == [] and health["lake"] == collector.lake.root


def test_health_hides_the_lake_path_when_a_token_is_set(start_collector) -> None:  # type: ignore[no-untyped-def]
    running = start_collector(bearer_token="t0ken")
    health = httpx.get(f"{running.url}/health").json()
    assert health["status"] == "ok" and health["auth"] is True
    assert "lake" not in health and running.lake.root not in str(health)


def test_langfuse_keys_hide_the_path_from_health_and_show_it_to_their_holder(start_collector) -> None:  # type: ignore[no-untyped-def]
    running = start_collector(langfuse_public_key="pk", langfuse_secret_key="sk")
    assert running.lake.root not in httpx.get(f"{running.url}/api/public/health").text
    assert httpx.get(f"{running.url}/api/public/projects").status_code == 401
    basic = base64.b64encode(b"pk:sk").decode()
    projects = httpx.get(f"{running.url}/api/public/projects", headers={"Authorization": f"Basic {basic}"})
    assert projects.json()["data"][0]["metadata"]["lake"] == running.lake.root
