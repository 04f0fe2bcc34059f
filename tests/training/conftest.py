"""Fixtures of the training tests: one tiny model per test session, built offline in seconds.

Other test folders can reuse it with `from tests.training.conftest import tiny_model` in their
own conftest (or the root conftest can import it for everyone).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from training.tiny import tiny_model_path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the tiny Qwen2-style model and tokenizer (built once per session, read-only by convention)."""
    return tiny_model_path(tmp_path_factory.getbasetemp() / "tiny-model-cache")
