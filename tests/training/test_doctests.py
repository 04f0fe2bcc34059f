"""The examples in the training docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "training.mismatch",
    "training.models.policies",
    "training.registry",
    "training.serving",
    "training.replay.rollout.loop",
    "training.chat.templates",
    "training.models.known",
    "training.replay.samplers.hf",
    "training.replay.samplers.seeded",
    "training.replay.samplers.shared_prefix",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
