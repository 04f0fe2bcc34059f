"""The examples in the store's docstrings run as written (the declarations other packages use)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "store.errors",
    "store.messages",
    "store.metrics",
    "store.pipeline_runs",
    "store.policy_names",
    "store.rows",
    "store.sampling",
    "store.selections",
    "store.vocabulary",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
