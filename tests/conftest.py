"""Shared fixtures: every test gets its own lake and no ambient trajlake/Prefect settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Lake


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (
        "TRAJLAKE_LAKE",
        "TRAJLAKE_CONFIG",
        "LANGFUSE_PUBLIC_KEY",
        "LANGFUSE_SECRET_KEY",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    """An empty lake in a temporary folder."""
    return Lake(str(tmp_path / "lake"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the tiny Qwen2-style model and tokenizer (built once per session, read-only by convention)."""
    from training.tiny import tiny_model_path

    return tiny_model_path(tmp_path_factory.getbasetemp() / "tiny-model-cache")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on loopback, in its own process (delta-rs, s3fs and DuckDB all talk to it)."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=1.0)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the moto S3 server did not start") from None
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=30)


def s3_lake_at(endpoint: str, bucket: str) -> Lake:
    """A lake in a fresh bucket of the moto server."""
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    options = {
        "key": "test",
        "secret": "test",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    return Lake(f"s3://{bucket}/lake", storage_options=options)
