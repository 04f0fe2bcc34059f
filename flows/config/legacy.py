"""`trajlake.toml`: one validated configuration for the whole loop, derived from the libraries.

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
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

from flows.config.sections import (
    EvaluateSettings,
    LakeSettings,
    PipelineSettings,
    Schedules,
    ScoreSettings,
    Selections,
)
from flows.settings import ConfigError, Section, derived_variable, env_overrides, merge, table_at

DEFAULT_CONFIG_FILE = "trajlake.toml"
OWN_TABLES = "flows.config.sections"  # the module of the tables that belong to the flow itself

# --- every table ----------------------------------------------------------------------------------

SFT_FIELDS = (
    "num_train_epochs",
    "max_steps",
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "packing",
    "tree_packing",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "seed",
    "activation_checkpointing",
    "save_steps",
    "report_to",
)
GRPO_FIELDS = (
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "warmup_steps",
    "max_completion_length",
    "mask_truncated_completions",
    "skip_equal_reward_groups",
    "max_staleness",
    "measure_sampler_gap",
    "tree_packing",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "lora_r",
    "seed",
    "activation_checkpointing",
    "save_steps",
    "report_to",
)
TRAIN_FLAGS = {
    "num_train_epochs": "--epochs",
    "learning_rate": "--lr",
    "per_device_train_batch_size": "--batch-size",
}

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


@dataclass
class TrajlakeConfig:
    """Validated values of every table; `build(key)` turns one into its library config."""

    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = "defaults"

    def build(self, key: str, **extra: Any) -> Any:
        """The config object of table `key`: the file's and the environment's values, then `extra`."""
        return SECTIONS[key].build(self.values.get(key, {}), self.source, **extra)

    @property
    def lake(self) -> LakeSettings:
        return self.build("lake")

    @property
    def select(self) -> Selections:
        return self.build("select")

    @property
    def score(self) -> ScoreSettings:
        return self.build("score")

    @property
    def evaluate(self) -> EvaluateSettings:
        return self.build("evaluate")

    @property
    def pipeline(self) -> PipelineSettings:
        return self.build("pipeline")

    @property
    def schedules(self) -> Schedules:
        return self.build("schedules")

    def with_lake(self, lake: str | None) -> TrajlakeConfig:
        """This config with `lake.path` replaced when a `--lake` option was given."""
        return self.with_values("lake", path=lake) if lake else self

    def with_values(self, key: str, **values: Any) -> TrajlakeConfig:
        """This config with some values of table `key` replaced (a command's own options)."""
        return TrajlakeConfig({**self.values, key: {**self.values.get(key, {}), **values}}, self.source)


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


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrajlakeConfig:
    """Read `trajlake.toml` (if any), apply environment overrides, and check every table."""
    environ = os.environ if environ is None else environ
    data, source = read_sources(path, environ)
    roots = {key.split(".")[0] for key in SECTIONS}
    unknown = [k for k in data if k not in roots]
    if unknown:
        raise ConfigError(
            unknown[0], f"unknown table; the configuration has: {', '.join(sorted(roots))}", source
        )
    config = TrajlakeConfig({key: parse_table(data, key, environ, source) for key in SECTIONS}, source)
    return validate(config)


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


def validate(config: TrajlakeConfig) -> TrajlakeConfig:
    """Build every table once: each library (and each of the flow's tables) checks its own values;
    then resolve what the tables name (rewards, tools, selections), as the stages will."""
    for key in SECTIONS:
        extra = {"output_dir": "unused"} if key in TRAINING_SECTIONS else {}
        config.build(key, **extra)
    if config.evaluate.group_size:  # evaluation replays with its own group size: the replay checks it
        try:
            config.build("replay", group_size=config.evaluate.group_size)
        except ConfigError as exc:
            raise ConfigError("evaluate.group_size", str(exc), config.source) from None
    check_references(config)
    return config


def check_references(config: TrajlakeConfig) -> None:
    """Resolve every reward, tool and selection the configuration names, as the stages will, so a
    bad one is a `ConfigError` naming its key before any work (not a failed run minutes later).

    Rewards are imported (`judging.resolve_reward_key`: each `reward` key takes a spec or the
    name of a scored reward), tools imported, selections parsed as one SELECT each.
    """
    import duckdb

    from judging import RewardSpecError, resolve_reward_key
    from training.replay.errors import ToolSourceError
    from training.replay.rollout.tools import CallableTools

    score = config.score
    checks: list[tuple[str, Any]] = [
        *((f"score.rewards[{i}]", partial(resolve_reward_key, spec)) for i, spec in enumerate(score.rewards)),
        (
            "score.reward",
            partial(resolve_reward_key, score.reward, score.rewards, combined=bool(score.weights)),
        ),
    ]
    checks += [(f"score.weights.{key}", partial(_check_weight, key, score.rewards)) for key in score.weights]
    if config.evaluate.reward:
        checks.append(("evaluate.reward", partial(resolve_reward_key, config.evaluate.reward, score.rewards)))
    tools = config.values.get("tools", {}).get("tool") or ()
    checks += [
        (f"tools.tool[{i}]", partial(CallableTools.from_specs, [spec])) for i, spec in enumerate(tools)
    ]
    select = config.select
    checks += [
        (f"select.{name}", partial(_check_selection, duckdb, getattr(select, name)))
        for name in ("scenarios", "replay", "sft", "evaluate")
    ]
    for key, check in checks:
        try:
            check()
        except (RewardSpecError, ToolSourceError, ValueError) as exc:
            raise ConfigError(key, str(exc), config.source) from None


def _check_weight(key: str, rewards: list[str]) -> None:
    from judging import RewardSpecError, resolve_reward_key

    try:
        spec: str | None = resolve_reward_key(key, rewards)[0]
    except RewardSpecError:
        spec = None
    if spec not in (*rewards, "ruler"):
        raise ValueError(f"not a scored reward; rewards: {', '.join(rewards)}")


def _check_selection(duckdb: Any, sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ValueError(f"the SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise ValueError("give one SELECT statement")


def describe() -> list[tuple[str, str, str]]:
    """(key, default, help) of every key, in table order: `trajlake config` and the README table."""
    rows = []
    for key in SECTIONS:
        for s in [*SECTIONS[key].settings, *(c for child in SECTIONS[key].children for c in child.settings)]:
            variable = f" Environment: `${s.variable}`." if s.variable else ""
            rows.append((s.toml_key, repr(s.env if s.env else s.default), s.help + variable))
    return rows
