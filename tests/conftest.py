"""Shared fixtures: every test gets its own lake and no ambient trajlake/Prefect settings."""

from __future__ import annotations

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
