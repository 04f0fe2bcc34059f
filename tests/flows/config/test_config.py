"""trajlake.toml: derived from the libraries' declarations; overrides and errors that name the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.commands import command_app, replay_cmds
from flows.commands.options import configured
from flows.commands.replay_cmds import replay_command, scenarios_create
from flows.config import ConfigError
from flows.config.checks import load_config
from flows.config.options import value_in_effect
from flows.config.root import Settings
from flows.config.sections import LakeSettings
from flows.demo.config import SIZES, write_demo_config
from flows.stages import StageError, base_model
from ingest.otlp.config import CollectorConfig
from store import writer
from store.lake import DEFAULT_LAKE
from store.selections import TRAIN_SCENARIOS
from tests.training.train_helpers import stored_groups
from training.replay.samplers import SamplerConfig
from training.replay.samplers.base import SamplingParams
from training.replay.scenarios import ScenarioConfig, ScenarioResult
from training.replay.stage import ReplayConfig

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trajlake.toml"
    path.write_text(text)
    return str(path)


def test_empty_file_is_the_embedded_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""))

    assert config.sampler == SamplerConfig()  # the library's own defaults, declared once
    assert config.replay == ReplayConfig()
    assert config.score.rewards == ["exact_match"]


@pytest.mark.parametrize(
    ("text", "key", "evidence"),
    [
        ("[replay]\ngroup_sise = 3", "replay.group_sise", "group_size"),  # typo: lists the real keys
        ("[replay]\ngroup_size = 'x'", "replay.group_size", "valid integer"),
        ("[sampler]\nbackend = 'tgi'", "sampler.backend", "'vllm-server'"),
        ("[sampler]\ndtype = 'bf16'", "sampler.dtype", "'bfloat16'"),
        ("[sampler]\nbackend = 'vllm-server'\ndtype = 'bfloat16'", "sampler.dtype", "vllm serve --dtype"),
        ("[replay]\ngroup_size = 1", "replay.group_size", "must be >= 2"),  # the library's own check
        ("[replay.sampling]\ntemperature = 0", "replay.sampling.temperature", "must be > 0"),
        ("[replay.sampling]\ntop_p = 2.0", "replay.sampling.top_p", "in (0, 1]"),
        ("[pipeline]\nreplay_shards = 0", "pipeline.replay_shards", "must be >= 1"),
        ("[evaluate]\ngroup_size = 1", "evaluate.group_size", "must be >= 2"),  # the replay's own check
        ("[train.sft]\nlora_r = 12", "train.sft.lora_r", "vLLM can serve"),  # checked by the library
        ("[score]\nweights = {nope = 1.0}", "score.weights.nope", "not a scored reward"),
        ("[collector]\nmax_body_mb = 0", "collector.max_body_mb", "must be positive"),
        ("[judge]\napi_key_env = 'NO_SUCH_VARIABLE'", "judge.api_key_env", "$NO_SUCH_VARIABLE is not set"),
        ("replay = 3", "replay", "expected a table"),
        ("[nope]\nx = 1", "nope", "unknown table"),
        ("[replay\n", "(syntax)", "line 1"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path: Path, text: str, key: str, evidence: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert info.value.field == key
    assert evidence in str(info.value)


def test_bad_environment_override_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLAKE_REPLAY__SAMPLING__TEMPERATURE", "0")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""))
    assert info.value.field == "replay.sampling.temperature"
    assert info.value.source == "$TRAJLAKE_REPLAY__SAMPLING__TEMPERATURE"


def test_the_lake_path_is_declared_once_and_read_from_one_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LakeSettings().path == CollectorConfig().lake == DEFAULT_LAKE
    monkeypatch.setenv("TRAJLAKE_LAKE", "s3://b/l")
    assert load_config(write(tmp_path, "")).lake.path == "s3://b/l"
    assert load_config(write(tmp_path, "")).collector.lake == "s3://b/l"  # the collector writes it
    monkeypatch.setenv("TRAJLAKE_LAKE", "2026")
    assert load_config(write(tmp_path, "")).lake.path == "2026"  # as written
    monkeypatch.delenv("TRAJLAKE_LAKE")
    monkeypatch.setenv("TRAJLAKE_LAKE__PATH", "s3://b/l")
    with pytest.raises(ConfigError) as info:  # the derived spelling would be a second variable
        load_config(write(tmp_path, ""))
    assert info.value.field == "lake.path" and "$TRAJLAKE_LAKE" in str(info.value)


def test_sampling_settings_are_the_samplers_own(tmp_path: Path) -> None:
    text = "[replay.sampling]\ntemperature = 0.8\nmax_tokens = 12\n[replay.limits]\nmax_turns = 2\n"
    replay = load_config(write(tmp_path, text)).replay
    assert replay.sampling == SamplingParams(temperature=0.8, max_tokens=12)  # no copy to drift from
    assert replay.limits.max_turns == 2


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_secrets_come_from_the_environment_variable_the_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLECTOR_TOKEN", "s3cret")
    path = write(
        tmp_path, '[collector]\nbearer_token_env = "COLLECTOR_TOKEN"\n[collector.redaction]\nemails = true\n'
    )
    collector = load_config(path).collector
    assert collector.bearer_token == "s3cret" and collector.redaction.emails is True


def test_cli_fails_before_any_work_on_bad_config(tmp_path: Path) -> None:
    path = write(tmp_path, "[pipeline]\nrounds = 0\n")
    lake = tmp_path / "lake"
    result = CliRunner().invoke(app, ["pipeline", "--config", path, "--lake", str(lake)])
    assert result.exit_code == 2
    assert "pipeline.rounds" in result.output
    assert not lake.exists()  # nothing ran, nothing was written


def test_the_base_model_has_no_fallback(tmp_path: Path) -> None:
    with pytest.raises(StageError) as info:
        base_model(load_config(write(tmp_path, "")).sampler)
    assert info.value.field == "sampler.model"  # not a tiny stand-in model, trained and published
    assert base_model(load_config(write(tmp_path, '[sampler]\nmodel = "org/m"\n')).sampler) == "org/m"


@pytest.mark.parametrize("command", [["pipeline"], ["serve", "--once"]])
def test_a_pipeline_without_a_base_model_is_refused_before_any_work(
    tmp_path: Path, command: list[str]
) -> None:
    path = write(tmp_path, "[pipeline]\nrounds = 1\n")
    lake = tmp_path / "lake"
    result = CliRunner().invoke(app, [*command, "--config", path, "--lake", str(lake)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "`sampler.model`" in lines[0]  # one line naming the setting, no traceback
    assert not lake.exists() and not (tmp_path / ".prefect").exists()  # nothing ran


def test_a_toml_key_an_environment_variable_and_an_option_reach_the_same_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ScenarioConfig] = []

    def create(lake: object, sql: str, config: ScenarioConfig) -> object:
        seen.append(config)
        return ScenarioResult(["s"], splits={"train": 1})

    monkeypatch.setattr(replay_cmds, "create_scenarios", create)
    monkeypatch.chdir(tmp_path)
    writer.write(str(tmp_path / "l"), "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])  # a lake to read
    monkeypatch.setenv("TRAJLAKE_CONFIG", write(tmp_path, "[scenarios]\nval_fraction = 0.3\nturn = 1\n"))
    args = [
        "scenarios",
        "create",
        "--sql",
        "SELECT trajectory_id FROM trajectories",
        "--lake",
        str(tmp_path / "l"),
    ]

    def run(*extra: str) -> ScenarioConfig:
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        return seen[-1]

    assert (run().val_fraction, run().turn) == (0.3, 1)  # from the file
    monkeypatch.setenv("TRAJLAKE_SCENARIOS__VAL_FRACTION", "0.4")
    assert (run().val_fraction, run().turn) == (0.4, 1)  # the environment beats the file
    assert (run("--val-fraction", "0.5").val_fraction, run().turn) == (0.5, 1)  # the option beats both
    assert Settings.model_fields["scenarios"].annotation is ScenarioConfig


def test_commands_use_the_config_files_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = tmp_path / "configured-lake"
    writer.write(str(lake), "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    monkeypatch.setenv("TRAJLAKE_CONFIG", write(tmp_path, f'[lake]\npath = "{lake}"\n'))
    result = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM runs", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"n": 1' in result.output


def test_the_docs_configuration_page_lists_every_key_trajlake_config_shows() -> None:
    """The docs site's configuration page is generated at build time (docs/hooks) from the same
    declarations `trajlake config` reads: every key it shows has a row there."""
    import importlib.util

    hook = Path(__file__).resolve().parents[3] / "docs" / "hooks" / "trajlake_docs.py"
    spec = importlib.util.spec_from_file_location("trajlake_docs_hook", hook)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.configuration_reference(None)
    result = CliRunner().invoke(app, ["config", "--markdown"])
    assert result.exit_code == 0
    keys = [line.split("`")[1] for line in result.output.splitlines() if line.startswith("| `")]
    assert len(keys) > 100
    for key in keys:
        table, name = key.rsplit(".", 1)
        assert f"### `[{table}]`" in page and f"| `{name}` |" in page, key


def test_reading_the_configuration_imports_no_training_library(tmp_path: Path) -> None:
    import subprocess
    import sys

    # every command reads the file and the environment first: `trajlake collect` or `trajlake sql`
    # must not pay for importing TRL (seconds) to learn which variables settings declare
    code = (
        "import sys; from flows.config.root import load_settings; load_settings().collector; "
        "print(sorted(m for m in ('trl', 'torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_commands_take_what_the_configuration_says_when_an_option_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule for every command: option > environment > trajlake.toml > declared default."""
    config = write(
        tmp_path,
        "[select]\nscenarios = \"SELECT trajectory_id FROM trajectories WHERE model = 'm1'\"\n"
        "sft = \"SELECT trajectory_id FROM trajectories WHERE model = 'm2'\"\n"
        '[score]\nrewards = ["valid_json"]\nreward = "valid_json"\n',
    )
    monkeypatch.setenv("TRAJLAKE_CONFIG", config)
    assert value_in_effect("select.scenarios") == (
        "SELECT trajectory_id FROM trajectories WHERE model = 'm1'",
        config,
    )
    monkeypatch.setenv("TRAJLAKE_SCORE__REWARD", "x")
    assert value_in_effect("score.reward") == ("x", "$TRAJLAKE_SCORE__REWARD")
    monkeypatch.delenv("TRAJLAKE_SCORE__REWARD")
    assert value_in_effect("select.replay") == (TRAIN_SCENARIOS, "default")

    lake = tmp_path / "lake"
    writer.write(str(lake), "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    seen: list[str] = []

    def create(lake: object, sql: str, config: object) -> object:
        seen.append(sql)
        return ScenarioResult(["s"], splits={"train": 1})

    monkeypatch.setattr(replay_cmds, "create_scenarios", create)
    monkeypatch.setenv("TRAJLAKE_CONFIG", config)
    result = CliRunner().invoke(app, ["scenarios", "create", "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    assert seen == ["SELECT trajectory_id FROM trajectories WHERE model = 'm1'"]  # not "Missing --sql"
    result = CliRunner().invoke(app, ["scenarios", "create", "--sql", "SELECT 1", "--lake", str(lake)])
    assert seen[-1] == "SELECT 1"  # the option beats the file
    # `score` without --reward scores `[score] rewards`: valid_json over a lake with no replay yet
    result = CliRunner().invoke(app, ["score", "--lake", str(lake), "--no-progress", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [s["reward"] for s in json.loads(result.output)] == ["valid_json"]


def test_train_commands_take_the_configured_selection_and_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    lake = tmp_path / "lake"
    rows, rewards = stored_groups(str(tiny_model), groups=2, size=4)
    writer.write(str(lake), "trajectories", rows)
    writer.write(str(lake), "rewards", rewards)
    config = write(
        tmp_path,
        '[select]\nsft = "SELECT trajectory_id FROM trajectories WHERE false"\n[score]\nreward = "configured"\n',
    )
    monkeypatch.setenv("TRAJLAKE_CONFIG", config)
    common = ["--base-model", str(tiny_model), "--lake", str(lake)]
    sft = CliRunner().invoke(app, ["train", "sft", "-o", str(tmp_path / "sft"), *common])
    grpo = CliRunner().invoke(app, ["train", "grpo", "-o", str(tmp_path / "grpo"), *common])
    # each read the file's value: SFT's selection (matching nothing), GRPO's reward (scored nowhere)
    assert sft.exit_code != 0 and "WHERE false" in sft.output, sft.output
    assert grpo.exit_code != 0 and "`configured`" in grpo.output and "reward_name" not in grpo.output, (
        grpo.output
    )


def test_config_shows_each_value_in_effect_and_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = write(tmp_path, '[replay]\ngroup_size = 8\n[publish]\nname = "calc"\n[score]\nreward = "x"\n')
    monkeypatch.setenv("TRAJLAKE_SCORE__REWARD", "combined")  # the environment beats the file
    result = CliRunner().invoke(app, ["config", "--config", config])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "replay.group_size = 8    (" + config + ")" in lines
    assert "publish.name = 'calc'    (" + config + ")" in lines
    assert "score.reward = 'combined'    ($TRAJLAKE_SCORE__REWARD)" in lines
    assert "replay.concurrency = 8    (default)" in lines
    bad = write(tmp_path, "[replay]\ngroup_size = 1\n")
    checked = CliRunner().invoke(app, ["config", "--config", bad, "--check"])
    assert checked.exit_code == 2 and "replay.group_size" in checked.output


def test_help_shows_the_value_the_command_will_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    config = write(tmp_path, "[replay]\ngroup_size = 8\n[scenarios]\nval_fraction = 0.25\n")
    monkeypatch.setenv("TRAJLAKE_CONFIG", config)
    monkeypatch.setenv("TRAJLAKE_REPLAY__RUN", "nightly")
    monkeypatch.setenv("COLUMNS", "200")
    app_ = command_app()
    app_.command("replay")(configured(replay_command, replay="replay", sampler="sampler", tools="tools"))
    app_.command("create")(configured(scenarios_create, scenarios="scenarios"))
    replay_help = CliRunner().invoke(app_, ["replay", "--help"]).output
    create_help = CliRunner().invoke(app_, ["create", "--help"]).output
    flat = re.sub(r"[│\s]+", "", replay_help + create_help)  # wrapped lines and the box's borders away
    assert f"[ineffect:8,from{config}]" in flat  # the file's, not the declared 4
    assert "[ineffect:nightly,from$TRAJLAKE_REPLAY__RUN]" in flat
    assert f"[ineffect:0.25,from{config}]" in flat  # not 0.1
    assert "[default:8]" in flat  # replay.concurrency: nothing set it, the declared default shows


def test_a_copied_demo_workdir_reads_and_writes_its_own_lake(tmp_path: Path) -> None:
    import shutil

    first = tmp_path / "demo"
    (first / "model").mkdir(parents=True)
    write_demo_config(first / "trajlake.toml", first / "lake", first / "model", SIZES["small"], None)
    text = (first / "trajlake.toml").read_text()
    assert str(first) not in text  # no absolute path of the original workdir in the file
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    config = load_config(copy / "trajlake.toml")
    assert config.lake.path == str((copy / "lake").resolve())
    assert config.sampler.model == str((copy / "model").resolve())

    # relative to the file, whatever the working folder; bare names and URLs stay as written
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "etc").mkdir()
    other = write(
        tmp_path / "elsewhere", '[lake]\npath = "s3://bucket/lake"\n[sampler]\nmodel = "Org/Model"\n'
    )
    config = load_config(other)
    assert (config.lake.path, config.sampler.model) == ("s3://bucket/lake", "Org/Model")
    nested = write(tmp_path / "etc", '[lake]\npath = "../lakes/main"\n')
    assert load_config(nested).lake.path == str((tmp_path / "lakes" / "main").resolve())
