"""The string-keyed tables the commands' options are still derived from (`flows.commands.options`),
read with `flows.settings`' own parsing; `flows.config.root.Settings` is the configuration every
stage, `trajlake config` and the checks read, and the options move to it next.

Below, as this module has described it: `trajlake.toml`, derived from the libraries.

Each TOML table is either a library's own config dataclass (`[replay]` is
`training.replay.ReplayConfig`, `[train.sft]` is `TrajlakeSFTConfig`, `[judge]` is
`judging.JudgeConfig`, ...), read through `flows.settings`, or one of the few tables
that belong to the flow itself, declared in `flows.config.sections`: what each stage selects
(`[select]`), which rewards score a round (`[score]`), how policies are measured
(`[evaluate]`), the loop's switches and task runner (`[pipeline]`), and the schedules. Every key has a default, so an empty file is a
valid configuration (the embedded default the demo starts from).

Validation happens before any work: an unknown key, a wrong type or a value a library
refuses is a `ConfigError` naming the key (`replay.group_size`), what was given, and
what is allowed. Environment overrides use `TRAJLAKE_<TABLE>__<KEY>`
(`TRAJLAKE_TRAIN__GRPO__BETA=0.04`), or the one variable a setting declares instead
(`lake.path` is `TRAJLAKE_LAKE`). Only this module and the CLI read the environment.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from flows.config.trainers import GRPO_FIELDS, SFT_FIELDS, TRAIN_FLAGS
from flows.settings import ConfigError, Section, derived_variable, env_overrides, merge, table_at

DEFAULT_CONFIG_FILE = "trajlake.toml"
OWN_TABLES = "flows.config.sections"  # the module of the tables that belong to the flow itself

# --- every table ----------------------------------------------------------------------------------

SECTIONS: dict[str, Section] = {
    s.key: s
    for s in (
        Section("lake", "flows.config.sections:LakeSettings"),
        Section("retention", "store.erasure:RetentionConfig"),
        Section(
            "collector",
            "ingest.otlp.config:CollectorConfig",
            exclude=("lake",),
            flags={"bearer_token": "--token", "idle_timeout_s": "--idle-timeout"},
        ),
        Section(
            "langfuse",
            "ingest.langfuse.config:LangfuseConfig",
            cli_exclude=("category_values",),
            flags={"observations_page_size": "--page-size"},
        ),
        Section(
            "langfuse.filters",
            "ingest.langfuse.config:PullFilters",
            flags={
                "environments": "--environment",
                "tags": "--tag",
                "user_id": "--user",
                "session_id": "--session",
            },
        ),
        Section("scenarios", "training.replay.scenarios:ScenarioConfig"),
        Section("sampler", "training.replay.samplers:SamplerConfig"),
        Section(
            "replay",
            "training.replay.stage:ReplayConfig",
            flags={"group_size": "--group-size -g"},
            exclude=("greedy",),  # the evaluation's own (`evaluate.greedy`), not a replay setting
        ),
        Section("tools", "training.replay.rollout.tools:ToolsConfig", flags={"recorded": "--recorded-tools"}),
        # `trajlake serve-sampler`: the sampling parameters of requests that set none, and
        # what one request may ask for (`--max-n`, `--max-tokens-limit`, ...).
        Section("serve_sampler", "training.replay.samplers.base:SamplingParams"),
        Section(
            "serve_sampler.limits",
            "training.replay.rollout.request_limits:RequestLimits",
            flags={"max_tokens": "--max-tokens-limit"},
        ),
        Section(
            "judge",
            "judging.config:JudgeConfig",
            cli_prefix="judge",
            cli_exclude=("rubric",),
            flags={"use_cache": "--cache", "max_attempts": "--max-attempts", "concurrency": "--concurrency"},
        ),
        Section("train.sft", "training.sft_config:TrajlakeSFTConfig", fields=SFT_FIELDS, flags=TRAIN_FLAGS),
        Section(
            "train.grpo", "training.grpo_config:TrajlakeGRPOConfig", fields=GRPO_FIELDS, flags=TRAIN_FLAGS
        ),
        Section("publish", "training.publish:PublishConfig"),
        Section("select", "flows.config.sections:Selections"),
        Section("score", "flows.config.sections:ScoreSettings"),
        Section("evaluate", "flows.config.sections:EvaluateSettings"),
        Section("pipeline", "flows.config.sections:PipelineSettings"),
        Section("schedules", "flows.config.sections:Schedules"),
    )
}
TRAINING_SECTIONS = ("train.sft", "train.grpo")  # TRL configs: need an output folder to be built


# --- loading --------------------------------------------------------------------------------------


def read_sources(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> tuple[dict[str, Any], str]:
    """The TOML file in effect (`path`, `$TRAJLAKE_CONFIG`, `./trajlake.toml`) merged with the environment."""
    chosen = path or environ.get("TRAJLAKE_CONFIG")
    data: dict[str, Any] = {}
    source = "defaults"
    if chosen is not None or Path(DEFAULT_CONFIG_FILE).exists():
        file = Path(chosen or DEFAULT_CONFIG_FILE)
        source = str(file)
        if not file.is_file():
            raise ConfigError("(file)", f"`{file}` does not exist or is not a file", source)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError("(syntax)", str(exc), source) from None
        except RecursionError:
            raise ConfigError(
                "(syntax)", f"values are nested over {MAX_TOML_DEPTH} levels deep", source
            ) from None
        if (key := too_deep(data)) is not None:  # every reader of settings recurses into values
            raise ConfigError(key, f"the value is nested over {MAX_TOML_DEPTH} levels deep", source)
        data = relative_to_file(data, file)
    overrides = env_overrides(environ, declared_variables())
    if overrides:
        source = f"{source} + environment"
    return merge(data, overrides), source


# Deeper than any setting is (a table of lists of tables...): a 5,000-deep array was a
# RecursionError in every command that read the file.
MAX_TOML_DEPTH = 32


def too_deep(data: dict[str, Any]) -> str | None:
    """The first key whose value nests past `MAX_TOML_DEPTH` levels, or None (iteratively)."""
    stack: list[tuple[str, Any, int]] = [(key, value, 1) for key, value in data.items()]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            return key
        children = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        )
        stack.extend((f"{key}.{k}" if isinstance(value, dict) else key, v, depth + 1) for k, v in children)
    return None


def relative_to_file(data: dict[str, Any], file: Path) -> dict[str, Any]:
    """`data` (just parsed from `file`) with each path setting written `./x` or `../x` made absolute
    against `file`'s folder: a configuration and the lake or model beside it move together.

    Only explicitly relative values move (a bare `name` may be a hub id, `s3://` a bucket), and
    only in tables the file has; the training tables (TRL's, slow to import) declare no path.
    """
    for key, section in SECTIONS.items():
        table = {} if key in TRAINING_SECTIONS else table_at(data, key, str(file))
        if not table:
            continue
        for setting in section.settings:
            value = table.get(setting.name)
            if setting.is_path and isinstance(value, str) and value.startswith(("./", "../")):
                table[setting.name] = str((file.parent / value).resolve())  # type: ignore[index]
    return data


@cache
def declared_variables() -> dict[str, str]:
    """Environment variables a setting declares for itself (`TRAJLAKE_LAKE`) -> its TOML key.

    Only the flow's own tables declare one: reading them imports nothing heavy, where the
    libraries' tables would import TRL into every command (4 s of `trajlake collect`'s start).
    """
    return {
        s.variable: s.key
        for section in SECTIONS.values()
        if section.target.startswith(f"{OWN_TABLES}:")
        for s in section.settings
        if s.variable
    }


def parse_table(data: Mapping[str, Any], key: str, environ: Mapping[str, str], source: str) -> dict[str, Any]:
    """The checked values of one table; sub-tables that are tables of their own are left to them."""
    own = {k: v for k, v in table_at(data, key, source).items() if f"{key}.{k}" not in SECTIONS}
    return SECTIONS[key].parse(own, environ, source)


@cache
def command_defaults(key: str) -> dict[str, Any]:
    """Values of table `key` from the file and environment in effect, for a command's options (cached)."""
    data, source = read_sources(None, os.environ)
    return parse_table(data, key, os.environ, source)


def setting_in_effect(key: str, environ: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """The value a command uses for `key` (`select.scenarios`) when no option gives it, and where it
    comes from: the environment beats the file, the file beats the declared default.

    Commands whose options stand for a configuration key (`scenarios create --sql` for
    `[select] scenarios`) take this value when the option is left out.
    """
    environ = os.environ if environ is None else environ
    table, _, name = key.rpartition(".")
    setting = next(s for s in SECTIONS[table].settings if s.name == name)
    if environ is os.environ:
        values = command_defaults(table)
    else:
        data, source = read_sources(None, environ)
        values = parse_table(data, table, environ, source)
    if name not in values:
        return setting.default, "default"
    variable = setting.variable or derived_variable(key)
    if variable in environ:
        return values[name], f"${variable}"
    return values[name], environ.get("TRAJLAKE_CONFIG") or DEFAULT_CONFIG_FILE
