"""Installs by role: the core (pyproject.toml's dependencies), its extras, and the
hint a command of a missing extra prints (the commands themselves on the core install: tests/core/)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from flows.commands import extras
from flows.commands.extras import EXTRA_OF, install_hint, missing_extra

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]
CORE = PYPROJECT["project"]["dependencies"]  # `pip install trajlake`: the core


def names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in requirements}


def test_every_library_of_an_extra_is_named_by_the_hint_table() -> None:
    for extra in ("train", "flows", "dask"):
        for name in names(OPTIONAL[extra]):
            assert EXTRA_OF.get(name.replace("-", "_")) == extra, f"{name} of `{extra}` is not in EXTRA_OF"


def test_the_core_holds_no_library_of_an_extra() -> None:
    assert names(CORE) & {name.replace("_", "-") for name in EXTRA_OF} == set()
    assert {"torch", "trl", "prefect"} <= names(OPTIONAL["train"]) | names(OPTIONAL["flows"])
    assert names(OPTIONAL["all"]) == {"trajlake"} and "[train,flows,dask]" in OPTIONAL["all"][0]
    assert "trajlake[all]" in OPTIONAL["dev"]


def test_a_missing_library_of_an_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRA_OF, "trajlake_test_not_installed", "train")
    error = ModuleNotFoundError(
        "No module named 'trajlake_test_not_installed'", name="trajlake_test_not_installed"
    )
    assert missing_extra(error) == "train"
    hint = install_hint("train", error, "train")
    assert (
        hint.startswith("`trajlake train` needs the `train` extra")
        and "pip install 'trajlake[train]'" in hint
    )


def test_an_installed_library_that_fails_to_import_is_not_a_missing_extra() -> None:
    # torch is installed here: a submodule it lacks is a broken install or a bug, and keeps its traceback
    assert missing_extra(ModuleNotFoundError("No module named 'torch._nope'", name="torch._nope")) is None
    assert missing_extra(ModuleNotFoundError("No module named 'orjson'", name="orjson")) is None


def test_a_command_of_several_extras_names_each_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.PROBE, "flows", "trajlake_test_not_installed")
    error = ModuleNotFoundError("No module named 'trl'", name="trl")
    hint = install_hint("train", error, "pipeline")
    assert "needs the `train` and `flows` extras" in hint and "pip install 'trajlake[train,flows]'" in hint
    assert "[train]'" in install_hint("train", error, "train")
