"""Fixtures of the training tests. The session-scoped `tiny_model` fixture lives in the root
`tests/conftest.py`, shared by every folder; the real model's (`smollm2`: SmolLM2-135M-Instruct
fetched and converted once per session into a temporary models folder) live here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from training.models.known import fetch_model

SMOLLM2 = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder holding the converted SmolLM2 (fetched and converted once per session)."""
    root = tmp_path_factory.mktemp("models")
    started = time.perf_counter()
    fetch_model(SMOLLM2, root)
    (root / "convert_s.txt").write_text(f"{time.perf_counter() - started:.1f}")
    return root


@pytest.fixture(scope="session")
def smollm2(models_root: Path) -> Path:
    return models_root / SMOLLM2
