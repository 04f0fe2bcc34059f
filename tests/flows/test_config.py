"""trajlake.toml: defaults, overrides, and errors that name the bad key before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.config import ConfigError, describe, env_overrides, load_config


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trajlake.toml"
    path.write_text(text)
    return str(path)


def test_empty_file_is_the_embedded_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), environ={})
    assert config.replay.backend == "transformers"
    assert config.replay.group_size == 4
    assert config.score.rewards == ["exact_match"]


def test_file_values_and_environment_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[replay]\ngroup_size = 8\n[train.grpo]\nbeta = 0.04\n[score]\nweights = {exact_match = 1.0}\n",
    )
    config = load_config(
        path, environ={"TRAJLAKE_REPLAY__GROUP_SIZE": "6", "TRAJLAKE_LAKE__PATH": "s3://b/lake"}
    )
    assert config.replay.group_size == 6  # environment beats the file
    assert config.train.grpo.beta == 0.04
    assert config.lake.path == "s3://b/lake"  # not TOML: kept as a string
    assert config.score.weights == {"exact_match": 1.0}


def test_env_overrides_parse_toml_values() -> None:
    assert env_overrides(
        {"TRAJLAKE_SCORE__REWARDS": '["a", "b"]', "OTHER": "1", "TRAJLAKE_X": "no-levels"}
    ) == {"score": {"rewards": ["a", "b"]}}


@pytest.mark.parametrize(
    ("text", "key", "evidence"),
    [
        ("[replay]\ngroup_sise = 3", "replay.group_sise", "group_size"),  # typo: lists the real keys
        ("[replay]\ngroup_size = 'x'", "replay.group_size", "expected int"),
        ("[replay]\nbackend = 'tgi'", "replay.backend", "'vllm-server'"),
        ("[replay]\ngroup_size = 1", "replay.group_size", "at least 2"),
        ("[train.sft]\nlora_r = 12", "train.sft.lora_r", "vLLM accepts"),
        ("[score.judge]\nmodel = 'judge'", "score.judge.base_url", "no endpoint"),
        ("[score]\nweights = {nope = 1.0}", "score.weights.nope", "not a configured reward"),
        ("replay = 3", "replay", "expected a table"),
        ("[replay\n", "(syntax)", "line 1"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path: Path, text: str, key: str, evidence: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert info.value.key == key
    assert evidence in str(info.value)


def test_bad_environment_override_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), environ={"TRAJLAKE_REPLAY__TEMPERATURE": "0"})
    assert info.value.key == "replay.temperature"
    assert "environment" in info.value.source


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_cli_fails_before_any_work_on_bad_config(tmp_path: Path) -> None:
    path = write(tmp_path, "[pipeline]\nrounds = 0\n")
    lake = tmp_path / "lake"
    result = CliRunner().invoke(app, ["pipeline", "--config", path, "--lake", str(lake)])
    assert result.exit_code == 2
    assert "pipeline.rounds" in result.output
    assert not lake.exists()  # nothing ran, nothing was written


def test_reference_documents_every_key() -> None:
    keys = [key for key, _, _ in describe()]
    assert "replay.group_size" in keys and "train.grpo.loss_type" in keys and "schedules.pipeline" in keys
    assert all(text for _, _, text in describe())


def test_collector_section_supplies_collect_defaults(tmp_path: Path) -> None:
    from flows.config import collect_defaults

    path = write(tmp_path, '[collector]\nport = 14318\ntoken_env = "COLLECTOR_TOKEN"\nredact_emails = true\n')
    config = load_config(path, environ={})
    defaults = collect_defaults(config, environ={"COLLECTOR_TOKEN": "s3cret"})
    assert defaults["port"] == 14318 and defaults["token"] == "s3cret" and defaults["redact_emails"] is True
    with pytest.raises(ConfigError) as info:
        collect_defaults(config, environ={})
    assert info.value.key == "collector.token_env"


def test_commands_use_the_config_files_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import store

    lake = tmp_path / "configured-lake"
    store.write(str(lake), "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    monkeypatch.setenv("TRAJLAKE_CONFIG", write(tmp_path, f'[lake]\npath = "{lake}"\n'))
    result = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM runs", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"n": 1' in result.output
