"""`trajlake train sft` and `trajlake train grpo`: the options are the `[train.sft]` and
`[train.grpo]` tables (TRL's `SFTConfig`/`GRPOConfig` fields trajlake exposes, plus its LoRA
fields); any other TRL/transformers setting is reachable with `--set name=value`.

Loaded only when a `train` command runs (`flows.commands.LazyGroup`): building
these options imports TRL, which every other command can do without.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import configured, in_effect_help, option_or_setting, quiet_libraries, setting
from flows.config.errors import ConfigError
from flows.config.options import value_in_effect
from flows.config.root import in_effect
from flows.config.trainers import TRAINERS, TrainSettings
from flows.progress import console_progress
from judging.errors import RewardSpecError
from judging.registry import reward_name
from store.catalog.versions import snapshot
from store.errors import LegacyRows, SelectionError, SettingError
from store.selections import GRPO_TRAJECTORIES
from training.distributed import is_writer
from training.errors import AdapterNotFound, BadHyperparameter, TrainingError
from training.lineage import as_of_versions as of_lineage
from training.registry import resolve_adapter, stage_lineage

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="Any other config field as name=value (JSON values), e.g. --set warmup_steps=10."
    ),
]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue from the newest checkpoint in the output folder.")
]
AsOfOption = Annotated[
    list[str] | None,
    typer.Option(
        "--as-of",
        help="Read the lake as an earlier run did: TABLE=VERSION (repeatable), or a published adapter "
        "NAME:VERSION whose lineage names the versions.",
    ),
]
BaseModelOption = Annotated[
    str | None,
    typer.Option(
        "--base-model",
        help=in_effect_help(
            "sampler.model",
            "Base model folder or hub id (available offline); default: `[sampler] model` of trajlake.toml "
            "or $TRAJLAKE_SAMPLER__MODEL.",
        ),
        show_default=False,
    ),
]
BASE_MODEL_MEANING = "the base model folder or hub id"
OutputOption = Annotated[
    Path, typer.Option("--output", "-o", help="Run folder: checkpoints/ and adapter/ go here.")
]


def parse_overrides(pairs: list[str] | None, config_cls: type) -> dict[str, Any]:
    """`name=value` pairs as config kwargs; unknown names fail listing close matches."""
    import difflib

    known = {f.name for f in fields(config_cls)}
    out: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise fail(f"`--set {pair}` must look like name=value")
        decided = getattr(config_cls, "DECIDED_BY_THE_DATA", {})
        if name in decided:  # the trainer would overwrite it: accepting it would be ignoring it
            raise fail(f"`{name}` is not a setting: {decided[name]}")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise fail(
                f"`{name}` is not a field of {config_cls.__name__}"
                + (f"; did you mean {', '.join(close)}?" if close else "")
            )
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw  # plain strings need no quotes
    return out


def stage_config(
    stage: str, train: TrainSettings, output: Path, overrides: list[str] | None, **extra: Any
) -> Any:
    """The trainer's config (TRL's, trajlake's subclass) from `[train.<stage>]` as in effect, the
    `--set` overrides and `extra`, checkpointing under `output`; a refused value is one line (exit
    2) naming the key and where it came from."""
    module, name, _ = TRAINERS[stage]
    cls = getattr(importlib.import_module(module), name)
    given = {**parse_overrides(overrides, cls), **extra}
    try:
        return train.trainer_config(stage, output_dir=str(output / "checkpoints"), **given)
    except SettingError as exc:
        key = f"train.{exc.field}" if exc.field else f"train.{stage}"
        try:
            source = in_effect().get(key, (None, "command line"))[1]
        except ConfigError:
            source = "command line"
        raise fail(str(ConfigError(key, str(exc), source)), 2) from None


def as_of_versions(values: list[str] | None, stage: str, lake: Any) -> dict[str, int] | None:
    """`--as-of` as `{table: version}`: explicit pairs, or the lineage of a published adapter's stage."""
    if not values:
        return None

    versions: dict[str, int] = {}
    for value in values:
        table, sep, number = value.partition("=")
        if sep:
            if not number.strip().isdigit():
                raise fail(f"--as-of `{value}`: expected TABLE=VERSION, e.g. trajectories=12", 2)
            versions[table.strip()] = int(number)
            continue
        try:
            versions.update(of_lineage(stage_lineage(lake, value, stage)))
        except AdapterNotFound as exc:
            raise fail(str(exc), 2) from None
    current = snapshot(lake)
    for table, version in versions.items():
        if table not in current:
            raise fail(f"--as-of `{table}`: not a table of the lake; its tables: {', '.join(current)}", 2)
        newest = current[table].version
        if newest is None or version > newest:
            have = f"versions 0..{newest}" if newest is not None else "no version yet"
            raise fail(f"--as-of `{table}={version}`: the table has {have}", 2)
    return versions


def print_result(result: Any) -> None:
    if not is_writer():  # several processes (torchrun, accelerate launch): rank 0 speaks for the run
        return
    typer.echo(f"{result.stage}: run `{result.run_id}`, {result.global_step} steps")
    for key, value in result.report.items():
        if value is not None:
            typer.echo(f"  {key}: {value}")
    typer.echo(f"adapter: {result.adapter_dir}")
    typer.echo(f"publish it: trajlake publish {result.adapter_dir} --name NAME")


def run_stage(
    stage: str,
    values: TrainSettings,
    output: Path,
    overrides: list[str] | None,
    as_of: list[str] | None,
    lake: str | None,
    train: Callable[[Any, Any, dict[str, int] | None], Any],
    **extra: Any,
) -> None:
    """One training command: its lake, config and snapshot checked before `train(lake, config, as_of)`
    runs; a training error is one line and exit 1."""
    config = stage_config(stage, values, output, overrides, **extra)
    the_lake = resolve_lake(lake, must_exist=True)  # training reads what the lake holds
    quiet_libraries()  # the trainer's own progress and trajlake's summary, not the libraries' bars
    versions = as_of_versions(as_of, stage, the_lake)
    try:
        with console_progress():  # each step's loss and what is left (`training.metrics.ProgressLog`)
            result = train(the_lake, config, versions)
    except (
        BadHyperparameter,
        LegacyRows,
    ) as exc:  # bad input (a base model that does not load, an older lake): exit 2
        raise fail(str(exc), 2) from None
    except (TrainingError, SelectionError) as exc:
        raise fail(str(exc)) from None
    print_result(result)


def train_sft_command(
    sft: TrainSettings,
    output: OutputOption,
    base_model: BaseModelOption = None,
    sql: Annotated[
        str | None,
        typer.Option(
            help=in_effect_help(
                "select.sft",
                "SQL returning the `trajectory_id`s to learn from (their conversations + tools); default: "
                "`[select] sft` of trajlake.toml or $TRAJLAKE_SELECT__SFT, else production conversations "
                "with content outside the val scenarios.",
            ),
            show_default=False,
        ),
    ] = None,
    resume: ResumeOption = False,
    as_of: AsOfOption = None,
    overrides: SetOption = None,
    lake: LakeOption = None,
) -> None:
    """Fine-tune a LoRA adapter on selected conversations (assistant tokens only)."""
    from training.sft import train_sft

    sql = sql or setting("select.sft")
    model = option_or_setting(base_model, "sampler.model", "--base-model", BASE_MODEL_MEANING)

    def train(the_lake: Any, config: Any, versions: dict[str, int] | None) -> Any:
        return train_sft(the_lake, sql, model, output, config, resume=resume, as_of=versions)

    run_stage("sft", sft, output, overrides, as_of, lake, train)


def train_grpo_command(
    grpo: TrainSettings,
    output: OutputOption,
    base_model: BaseModelOption = None,
    sql: Annotated[
        str,
        typer.Option(
            help="SQL returning the `trajectory_id`s of scored groups with token data (and optionally "
            "`reward`); default: every replayed trajectory with token data outside the val scenarios."
        ),
    ] = GRPO_TRAJECTORIES,
    adapter: Annotated[
        str | None,
        typer.Option(help="Adapter to continue from: a folder, or a registry ref name[:version|:alias]."),
    ] = None,
    reward: Annotated[
        str | None,
        typer.Option(
            help=in_effect_help(
                "score.reward",
                "Reward to train on: its name (rewards.name) or its spec `package.module:function` "
                "(default: `[score] reward` of trajlake.toml or $TRAJLAKE_SCORE__REWARD, else the groups' "
                "only reward).",
            ),
            show_default=False,
        ),
    ] = None,
    resume: ResumeOption = False,
    as_of: AsOfOption = None,
    overrides: SetOption = None,
    lake: LakeOption = None,
) -> None:
    """Train (or continue) a LoRA adapter with GRPO on stored, scored groups."""
    from training.grpo import train_grpo

    model = option_or_setting(base_model, "sampler.model", "--base-model", BASE_MODEL_MEANING)

    def train(the_lake: Any, config: Any, versions: dict[str, int] | None) -> Any:
        start = adapter
        if start is not None and not Path(start).exists():
            start = resolve_adapter(the_lake, start)["path"]
        return train_grpo(the_lake, sql, model, start, output, config, resume=resume, as_of=versions)

    if reward is None:  # the configured one; with none configured, the groups' only reward
        try:
            configured_reward, source = value_in_effect("score.reward")
        except ConfigError as exc:
            raise fail(str(exc), 2) from None
        reward = None if source == "default" else configured_reward
    if reward is not None and ":" in reward:  # a spec: its rows' name
        try:
            reward = reward_name(reward)
        except RewardSpecError as exc:
            raise fail(str(exc), 2) from None
    run_stage("grpo", grpo, output, overrides, as_of, lake, train, reward_name=reward)


app = command_app()  # joins `trajlake train` on first use
app.command("sft")(configured(train_sft_command, sft="train.sft"))
app.command("grpo")(configured(train_grpo_command, grpo="train.grpo"))
