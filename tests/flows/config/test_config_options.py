"""Options whose value the configuration provides are not required on the command line, their
`--help` shows the value in effect, and a configuration error is printed once, naming the file
and the key it came from (not "(command line)" for a value from the file)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.commands import replay_cmds
from store import writer


@pytest.fixture
def configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Write `trajlake.toml` in a fresh folder and make it the one every command reads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")

    def write(text: str) -> str:
        path = tmp_path / "trajlake.toml"
        path.write_text(text)
        monkeypatch.setenv("TRAJLAKE_CONFIG", str(path))
        return str(path)

    yield write


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def option_help(text: str, flag: str) -> str:
    """The lines of one option in a command's help (its flag's line up to the next option's)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(f"{flag} ")), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("-")), len(lines))
    return "\n".join(lines[start:end])


def lake_with_a_row(tmp_path: Path) -> str:
    lake = str(tmp_path / "lake")
    writer.write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    return lake


def test_help_shows_the_configured_model_and_selection_and_requires_neither(
    configure: Any, tmp_path: Path
) -> None:
    model = str(tmp_path / "models" / "units-base")
    config = configure(
        f'[sampler]\nmodel = "{model}"\n[select]\nreplay = "SELECT scenario_id FROM scenarios LIMIT 3"\n'
    )
    # an option's help is derived when its command's module loads: once per `trajlake` process
    for module in ("flows.commands.replay_cmds", "flows.commands.trl_cmds"):
        importlib.reload(importlib.import_module(module))
    helps = {
        "serve-sampler": invoke("serve-sampler", "--help").output,
        "replay": invoke("replay", "--help").output,
        "train sft": invoke("train", "sft", "--help").output,
        "train grpo": invoke("train", "grpo", "--help").output,
    }
    flat = {name: re.sub(r"[│\s]+", "", text) for name, text in helps.items()}
    for name in ("serve-sampler", "train sft", "train grpo"):
        assert f"[ineffect:{model},from{config}]" in flat[name], helps[name]
    assert f"[ineffect:SELECTscenario_idFROMscenariosLIMIT3,from{config}]" in flat["replay"]
    for name, flag in [
        ("serve-sampler", "--model"),
        ("replay", "--scenarios"),
        ("train sft", "--base-model"),
    ]:
        shown = option_help(helps[name], flag)
        assert shown and "[required]" not in shown, f"{name}: {helps[name]}"


def test_train_takes_the_configured_base_model_and_without_one_says_how_to_give_it(
    configure: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.sft

    lake = lake_with_a_row(tmp_path)
    seen: list[str] = []

    def train_sft(the_lake: Any, sql: str, base_model: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(base_model)
        return SimpleNamespace(stage="sft", run_id="r", global_step=0, report={}, adapter_dir="out/adapter")

    monkeypatch.setattr(training.sft, "train_sft", train_sft)
    configure('[sampler]\nmodel = "units-base"\n')
    result = invoke("train", "sft", "-o", str(tmp_path / "out"), "--lake", lake)
    assert result.exit_code == 0, result.output
    result = invoke("train", "sft", "-o", str(tmp_path / "out"), "--lake", lake, "--base-model", "other")
    assert result.exit_code == 0, result.output
    assert seen == ["units-base", "other"]  # the file's, then the option over it

    configure("")
    result = invoke("train", "sft", "-o", str(tmp_path / "out"), "--lake", lake)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --base-model is required: the base model folder or hub id; or set `model` in `[sampler]` "
        "of trajlake.toml ($TRAJLAKE_SAMPLER__MODEL)"
    ]


def test_serve_sampler_serves_the_configured_model(configure: Any, tmp_path: Path) -> None:
    configure(f'[sampler]\nmodel = "{tmp_path / "missing"}"\n')
    result = invoke("serve-sampler", "--port", "0")
    # the configured folder is what it tried to load (no "Missing option '--model'")
    assert result.exit_code == 2 and f"--model `{tmp_path / 'missing'}` is not a folder" in result.output


def test_replay_replays_the_configured_selection(
    configure: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    lake = lake_with_a_row(tmp_path)
    seen: list[str] = []

    def replay(the_lake: Any, scenarios: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(scenarios)
        return SimpleNamespace(
            group_ids=[],
            trajectory_ids=[],
            generated_tokens=0,
            tokens_per_s=0.0,
            skipped_group_ids=[],
            failed=[],
        )

    monkeypatch.setattr(replay_cmds, "run_replay", replay)
    configure(
        f'[sampler]\nmodel = "{tiny_model}"\n[select]\nreplay = "SELECT scenario_id FROM scenarios LIMIT 3"\n'
    )
    result = invoke("replay", "--lake", lake)
    assert result.exit_code == 0, result.output
    assert seen == ["SELECT scenario_id FROM scenarios LIMIT 3"]


def test_an_error_in_the_file_is_printed_once_naming_the_file_and_key(configure: Any, tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text('{"messages": [{"role": "user", "content": "5 miles in km?"}]}\n')
    config = configure("[scenarios]\nval_fraction = 2.0\n")
    # the library refuses the value (it names no field): the file set it, so the file is named
    result = invoke("scenarios", "load", "s.jsonl", "--lake", str(tmp_path / "lake"))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: bad configuration `scenarios.val_fraction` ({config}): `val_fraction` must be in [0, 1), got 2.0"
    ]
    configure("[scenarios]\nval_fraction = 0.2\n")
    result = invoke("scenarios", "load", "s.jsonl", "--lake", str(tmp_path / "lake"), "--val-fraction", "2.0")
    assert (
        result.exit_code == 2 and "(command line)" in result.output
    )  # the option's value, the option's fault

    config = configure('[replay]\ngroup_size = "x"\n')
    result = invoke("replay", "--scenarios", "SELECT 1")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: bad configuration `replay.group_size` ({config}): Input should be a valid integer, "
        "unable to parse string as an integer, got 'x'"
    ]


def test_a_refused_training_setting_from_the_file_names_the_file(configure: Any, tmp_path: Path) -> None:
    config = configure('[sampler]\nmodel = "units-base"\n[train.sft]\nlora_r = 12\n')
    result = invoke("train", "sft", "-o", str(tmp_path / "out"), "--lake", lake_with_a_row(tmp_path))
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: bad configuration `train.sft.lora_r` ({config}): ") and "vLLM" in line
