"""Every `reward` key takes one kind of value (a spec, or the name of a scored reward), and
`trajlake config --check` (and every command that loads the configuration) resolves each reward,
tool and selection the configuration names before any work: a bad one is exit 2 and one line
naming the key and the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import flows.stages.evaluate
from flows.cli import app
from flows.config.checks import load_config
from flows.config.errors import ConfigError
from flows.stages.evaluate import evaluation_reward
from flows.stages.score import combined_weights, training_reward
from judging.errors import RewardSpecError
from judging.registry import get_reward, resolve_reward_key

UNITS = '''\
"""A user's reward module, on the import path as a user's package would be."""


def unit_reward(trajectory, scenario):
    return 1.0


def convert(value: float, unit: str) -> str:
    return f"{value} {unit}"


NOT_A_FUNCTION = 3
'''


@pytest.fixture
def units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module `units_mod_<test>` with `unit_reward` and a `convert` tool, importable."""
    name = f"units_mod_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(UNITS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trajlake.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("written", ["unit", "{m}:unit_reward"])
def test_score_reward_and_evaluate_reward_take_the_spec_or_the_name(
    tmp_path: Path, units: str, written: str
) -> None:
    spec = f"{units}:unit_reward"
    key = written.format(m=units)
    config = load_config(
        write(
            tmp_path,
            f'[score]\nrewards = ["exact_match", "{spec}"]\nreward = "{key}"\n[evaluate]\nreward = "{key}"\n',
        )
    )
    assert training_reward(config.score) == "unit"  # the rows' name, what GRPO reads
    assert evaluation_reward(score=config.score, evaluate=config.evaluate) == spec  # what evaluation scores
    assert resolve_reward_key(key, [spec]) == (spec, "unit")


def test_weights_take_the_spec_or_the_name_and_combine_by_name(tmp_path: Path, units: str) -> None:
    spec = f"{units}:unit_reward"
    config = load_config(
        write(
            tmp_path,
            f'[score]\nrewards = ["exact_match", "{spec}"]\nreward = "combined"\n'
            f'[score.weights]\n"{spec}" = 0.25\nexact_match = 0.75\n',
        )
    )
    assert combined_weights(config.score) == {"unit": 0.25, "exact_match": 0.75}  # the names rows have
    assert training_reward(config.score) == "combined"
    named = load_config(
        write(tmp_path, f'[score]\nrewards = ["{spec}"]\nreward = "combined"\n[score.weights]\nunit = 1.0\n')
    )
    assert combined_weights(named.score) == {"unit": 1.0}


def test_a_reward_names_nothing_scored_is_refused_listing_what_is() -> None:
    with pytest.raises(RewardSpecError, match=r"name of a scored reward \(exact_match\)"):
        resolve_reward_key("unit", ["exact_match"])
    assert resolve_reward_key("combined", ["exact_match"], combined=True) == ("combined", "combined")


@pytest.mark.parametrize(
    ("text", "key", "evidence"),
    [
        # the finding: `evaluate.reward` named a module that is not there; the run failed 44 s in
        ('[evaluate]\nreward = "nosuch_units:unit_reward"\n', "evaluate.reward", "cannot import module"),
        ('[score]\nrewards = ["exact_match"]\nreward = "unit"\n', "score.reward", "not a reward"),
        (
            '[score]\nrewards = ["{m}:nope_reward"]\nreward = "exact_match"\n',
            "score.rewards[0]",
            "has no `nope",
        ),
        (
            '[score]\nrewards = ["{m}:NOT_A_FUNCTION"]\nreward = "exact_match"\n',
            "score.rewards[0]",
            "not a function",
        ),
        (
            '[tools]\ntool = ["{m}:convert", "nosuch_tools:convert"]\n',
            "tools.tool[1]",
            "cannot import module",
        ),
        ('[tools]\ntool = ["{m}:NOT_A_FUNCTION"]\n', "tools.tool[0]", "not a callable"),
        ('[select]\nreplay = "SELEC scenario_id FROM scenarios"\n', "select.replay", "does not parse"),
        ('[select]\nsft = "DELETE FROM trajectories"\n', "select.sft", "one SELECT"),
        # bound against the lake's views before any work: a misspelt column, the wrong id column
        (
            '[select]\nsft = "SELECT trajectory_id FROM trajectories WHERE user_feedbak > 0"\n',
            "select.sft",
            '"user_feedbak" not found',
        ),
        (
            '[select]\nreplay = "SELECT source_trajectory_id FROM scenarios"\n',
            "select.replay",
            "`scenario_id`",
        ),
        ('[select]\nevaluate = "SELECT scenario_id FROM scenaros"\n', "select.evaluate", "scenaros"),
        # RULER scored with no judge model named: no default model is ever called (it costs money)
        (
            '[score]\nrewards = ["exact_match", "ruler"]\nreward = "exact_match"\n',
            "judge.model",
            "no judge model",
        ),
    ],
)
def test_config_check_resolves_what_the_configuration_names(
    tmp_path: Path, units: str, text: str, key: str, evidence: str
) -> None:
    config = write(tmp_path, text.replace("{m}", units))
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    assert raised.value.field == key and evidence in str(raised.value)
    result = CliRunner().invoke(app, ["config", "--config", config, "--check"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output  # one line, not the listing and then the line
    assert f"`{key}` ({config})" in lines[0] and evidence in lines[0]


def test_config_check_passes_a_configuration_whose_references_resolve(tmp_path: Path, units: str) -> None:
    config = write(
        tmp_path,
        f'[score]\nrewards = ["{units}:unit_reward"]\nreward = "unit"\n[tools]\ntool = ["{units}:convert"]\n',
    )
    result = CliRunner().invoke(app, ["config", "--config", config, "--check"])
    assert result.exit_code == 0, result.output
    assert "every reward, tool and selection it names resolves" in result.output


def test_a_pipeline_with_a_bad_reward_fails_before_any_work(tmp_path: Path) -> None:
    config = write(tmp_path, '[evaluate]\nreward = "nosuch_units:unit_reward"\n')
    lake = tmp_path / "lake"
    result = CliRunner().invoke(app, ["pipeline", "--config", config, "--lake", str(lake)])
    assert result.exit_code == 2 and "`evaluate.reward`" in result.output
    assert not lake.exists()  # nothing written


def test_a_package_registers_a_reward_by_name_with_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed distribution's `trajlake.rewards` entry point: its name is a spec everywhere."""
    (tmp_path / "units_pkg_rewards.py").write_text(
        "from judging.rewards.base import reward_version\n\n\n@reward_version('3')\ndef unit_reward(trajectory, scenario):\n"
        "    return 1.0\n"
    )
    info = tmp_path / "units_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: units-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[trajlake.rewards]\nunits = units_pkg_rewards:unit_reward\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reward = get_reward("units")
        assert (reward.name, reward.scorer) == ("units", "units_pkg_rewards:unit_reward@3")
        config = write(tmp_path, '[score]\nrewards = ["units"]\nreward = "units"\n')
        assert training_reward(load_config(config).score) == "units"
        result = CliRunner().invoke(app, ["config", "--config", config, "--check"])
        assert result.exit_code == 0, result.output
        with pytest.raises(RewardSpecError, match=r"or a registered one \(.*units.*\)"):
            get_reward("unitz")
    finally:
        sys.modules.pop("units_pkg_rewards", None)


def test_publish_gate_takes_a_scored_rewards_name_and_refuses_an_unknown_one_in_one_line(
    tmp_path: Path, units: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def evaluate_adapter(lake: object, adapter: str, **sections: Any) -> object:
        seen.append(sections["evaluate"].reward)
        raise flows.stages.evaluate.StageError("select.evaluate", "stopped here")

    monkeypatch.setattr(flows.stages.evaluate, "evaluate_adapter", evaluate_adapter)
    monkeypatch.setenv(
        "TRAJLAKE_CONFIG", write(tmp_path, f'[score]\nrewards = ["{units}:unit_reward"]\nreward = "unit"\n')
    )
    command = ["publish", str(tmp_path / "adapter"), "--base-model", "m", "--lake", str(tmp_path / "lake")]
    result = CliRunner().invoke(app, [*command, "--eval-reward", "unit"])
    assert seen == [f"{units}:unit_reward"] and "stopped here" in result.output  # the name's spec scores
    result = CliRunner().invoke(app, [*command, "--eval-reward", "units"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "reward `units`: is not a reward" in result.output and "(unit)" in result.output
