"""`Settings`: one typed object whose sections are the libraries' declarations, read by
pydantic-settings from the command line, the environment and trajlake.toml, in that precedence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.config.errors import ConfigError
from flows.config.keys import describe
from flows.config.root import Settings, in_effect, load_settings
from judging.config import JudgeConfig
from training.replay.samplers import SamplerConfig
from training.replay.samplers.base import SamplingParams
from training.replay.stage import ReplayConfig

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("TRAJLAKE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./trajlake.toml but the test's own


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trajlake.toml"
    path.write_text(text)
    return str(path)


def test_sections_are_the_libraries_own_dataclasses(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""))
    assert settings.sampler == SamplerConfig() and settings.replay == ReplayConfig()  # declared once
    assert settings.score.rewards == ["exact_match"]
    text = (
        "[replay]\ngroup_size = 6\n[replay.sampling]\ntemperature = 0.8\n[langfuse.filters]\ntags = ['a']\n"
    )
    settings = load_settings(write(tmp_path, text))
    assert isinstance(settings.replay, ReplayConfig) and settings.replay.group_size == 6
    assert settings.replay.sampling == SamplingParams(temperature=0.8)
    assert settings.langfuse.filters.tags == ("a",)


def test_command_line_beats_environment_beats_file_beats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[replay]\ngroup_size = 8\nconcurrency = 3\n[train.grpo]\nbeta = 0.04\n")
    monkeypatch.setenv("TRAJLAKE_REPLAY__GROUP_SIZE", "6")
    monkeypatch.setenv("TRAJLAKE_LAKE", "2026")
    settings = load_settings(path)
    assert (settings.replay.group_size, settings.replay.concurrency) == (6, 3)  # env > file, file kept
    assert settings.lake.path == "2026"  # a declared variable, read as written
    assert settings.train.grpo == {"beta": 0.04}
    given = load_settings(path, {"replay": {"group_size": 4}})
    assert (given.replay.group_size, given.replay.concurrency) == (4, 3)
    assert given.replay.sampling == SamplingParams()  # the rest of the section stays declared


@pytest.mark.parametrize(
    ("text", "key", "evidence"),
    [
        ("[replay]\ngroup_sise = 3", "replay.group_sise", "group_size"),  # typo: lists the real keys
        ("[replay]\ngroup_size = 'x'", "replay.group_size", "valid integer"),
        ("[sampler]\nbackend = 'tgi'", "sampler.backend", "'vllm-server'"),
        ("[replay]\ngroup_size = 1", "replay.group_size", "must be >= 2"),  # the library's own check
        ("[replay.sampling]\ntemperature = 0", "replay.sampling.temperature", "must be > 0"),
        ("[pipeline]\nreplay_shards = 0", "pipeline.replay_shards", "must be >= 1"),
        ("[collector]\nmax_body_mb = 0", "collector.max_body_mb", "must be positive"),
        ("[judge]\napi_key_env = 'NO_SUCH_VARIABLE'", "judge.api_key_env", "$NO_SUCH_VARIABLE is not set"),
        ("[judge]\napi_key = 'sk-1'", "judge.api_key", "`api_key_env`"),  # no secret in the file
        ("[train.sft]\nlearning_rat = 1", "train.sft.learning_rat", "learning_rate"),
        ("replay = 3", "replay", "expected a table"),
        ("[nope]\nx = 1", "nope", "unknown table"),
        ("[replay\n", "(syntax)", "line 1"),
    ],
)
def test_a_bad_value_names_the_key_and_the_file(tmp_path: Path, text: str, key: str, evidence: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.field == key and evidence in str(info.value)
    assert info.value.source == path


def test_a_bad_variable_or_option_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[replay.sampling]\ntemperature = 0.5\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, {"replay": {"group_size": 1}})
    assert (info.value.field, info.value.source) == ("replay.group_size", "command line")
    monkeypatch.setenv("TRAJLAKE_REPLAY__SAMPLING__TEMPERATURE", "0")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.field == "replay.sampling.temperature"
    assert info.value.source == "$TRAJLAKE_REPLAY__SAMPLING__TEMPERATURE"
    monkeypatch.delenv("TRAJLAKE_REPLAY__SAMPLING__TEMPERATURE")
    monkeypatch.setenv("TRAJLAKE_LAKE__PATH", "s3://b/l")  # the derived spelling of `$TRAJLAKE_LAKE`
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.field == "lake.path" and "$TRAJLAKE_LAKE" in str(info.value)


def test_secrets_come_from_the_variable_the_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLECTOR_TOKEN", "s3cret")
    text = '[collector]\nbearer_token_env = "COLLECTOR_TOKEN"\n[collector.redaction]\nemails = true\n'
    collector = load_settings(write(tmp_path, text)).collector
    assert collector.bearer_token == "s3cret" and collector.redaction.emails is True


def test_paths_in_a_file_are_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    nested = write(tmp_path / "etc", '[lake]\npath = "../lakes/main"\n[sampler]\nmodel = "Org/Model"\n')
    settings = load_settings(nested)
    assert settings.lake.path == str((tmp_path / "lakes" / "main").resolve())
    assert settings.sampler.model == "Org/Model"  # a bare name may be a hub id: as written


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_trl_fields_are_built_by_trls_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLAKE_TRAIN__GRPO__BETA", "0.04")  # a string: TRL's declared type reads it
    settings = load_settings(write(tmp_path, "[train.sft]\nlora_r = 8\n"))
    assert settings.train.grpo_config("out").beta == 0.04
    assert settings.train.sft_config("out").lora_r == 8


def test_in_effect_says_where_each_value_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[replay]\ngroup_size = 8\n[score]\nreward = "x"\nweights = {a = 1.0}\n')
    monkeypatch.setenv("TRAJLAKE_SCORE__REWARD", "combined")
    monkeypatch.setenv("TRAJLAKE_LAKE", "s3://b/l")
    found = in_effect(path)
    assert found["replay.group_size"] == (8, path)
    assert found["score.reward"] == ("combined", "$TRAJLAKE_SCORE__REWARD")
    assert found["score.weights"] == ({"a": 1.0}, path)  # a table setting, whole
    assert found["lake.path"] == ("s3://b/l", "$TRAJLAKE_LAKE")
    assert "replay.concurrency" not in found


def test_every_key_is_described_from_its_declaration() -> None:
    import dataclasses

    rows = {key.key: key for key in describe()}
    group_size = next(f for f in dataclasses.fields(ReplayConfig) if f.name == "group_size")
    assert rows["replay.group_size"].default == group_size.default
    assert rows["replay.group_size"].help == group_size.metadata["help"]
    assert rows["judge.api_key_env"].default == "OPENAI_API_KEY"  # a secret: the variable, never a value
    assert rows["lake.path"].variable == "TRAJLAKE_LAKE"
    assert {"train.sft.learning_rate", "train.grpo.loss_type", "schedules.pipeline"} <= set(rows)
    assert set(rows) >= {f"judge.{f.name}" for f in dataclasses.fields(JudgeConfig) if f.name != "api_key"}
    assert all(key.help for key in rows.values())
    assert set(Settings.model_fields) == {key.split(".")[0] for key in rows}


def test_config_shows_values_and_sources_without_a_cache_or_the_trainers(tmp_path: Path) -> None:
    config = write(tmp_path, "[replay]\ngroup_size = 8\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAJLAKE_")},
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
        "TRAJLAKE_SCORE__REWARD": "combined",
    }
    program = (
        "import sys; from flows.cli import main; sys.argv = ['trajlake', 'config', '--config', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('trl', 'torch', 'transformers', 'peft', 'prefect') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, config], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"replay.group_size = 8    ({config})" in lines
    assert "score.reward = 'combined'    ($TRAJLAKE_SCORE__REWARD)" in lines
    assert "replay.concurrency = 8    (default)" in lines
    assert lines[-1] == "[]"  # no trainer, no Prefect
    assert not (tmp_path / "cache").exists() and not (tmp_path / ".cache").exists()  # nothing cached


def test_config_check_is_one_line_naming_the_key_and_the_file(tmp_path: Path) -> None:
    bad = write(tmp_path, "[replay]\ngroup_size = 1\n")
    result = CliRunner().invoke(app, ["config", "--config", bad, "--check"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"`replay.group_size` ({bad})" in lines[0]
    trl = write(tmp_path, "[train.sft]\nlora_r = 12\n")  # checked by trajlake's TRL config
    result = CliRunner().invoke(app, ["config", "--config", trl, "--check"])
    assert result.exit_code == 2 and f"`train.sft.lora_r` ({trl})" in result.output
    assert "vLLM can serve" in result.output
