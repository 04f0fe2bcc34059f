"""The examples in the judging docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "judging.trajectory",
    "judging.registry",
    "judging.rewards.match",
    "judging.rewards.format",
    "judging.rewards.tools",
    "judging.rewards.penalties",
    "judging.ruler.prompt",
    "judging.ruler.parse",
    "judging.combine",
    "judging.agreement",
    "judging.evaluation_stats",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
