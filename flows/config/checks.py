"""What `trajlake config --check` and the pipeline check before any work, beyond what each section
checks of itself: TRL's configs build, the evaluation's group size is one the replay takes, and
every reward, tool and selection the configuration names resolves, as the stages will resolve it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from functools import partial
from typing import Any

import duckdb

from flows.config.errors import ConfigError
from flows.config.naming import config_file
from flows.config.root import Settings, load_settings, source_of
from judging.errors import RewardSpecError
from judging.registry import resolve_reward_key
from store.catalog.connection import check_selection, connect
from store.errors import SelectionError, SettingError
from training.replay.errors import ToolSourceError
from training.replay.rollout.tools import CallableTools


def load_config(path: str | os.PathLike[str] | None = None) -> Settings:
    """The settings in effect, checked as a pipeline run needs them: every section builds (TRL's
    too) and every reward, tool and selection they name resolves; else a `ConfigError`."""
    return check(load_settings(path), None if path is None else str(path))


def check(settings: Settings, path: str | None = None) -> Settings:
    """`settings` when everything it names resolves; else a `ConfigError` naming the first key that
    does not, and the file or variable that set it."""
    file = config_file(path)
    checks: list[tuple[str, Callable[[], Any]]] = [
        ("train.sft", partial(settings.train.sft_config, "unused")),
        ("train.grpo", partial(settings.train.grpo_config, "unused")),
    ]
    if settings.evaluate.group_size:  # evaluation replays with its own group size: the replay checks it
        checks.append(
            (
                "evaluate.group_size",
                partial(dataclasses.replace, settings.replay, group_size=settings.evaluate.group_size),
            )
        )
    checks += references(settings)
    for key, run in checks:
        try:
            run()
        except SettingError as exc:
            named = f"train.{exc.field}" if key.startswith("train.") and exc.field else key
            raise ConfigError(named, str(exc), source_of(named, file, {})) from None
        except (RewardSpecError, ToolSourceError, ValueError) as exc:
            raise ConfigError(key, str(exc), source_of(key, file, {})) from None
    return settings


def references(settings: Settings) -> list[tuple[str, Callable[[], Any]]]:
    """(key, check) of every reward, tool and selection the settings name: rewards are imported
    (`judging.resolve_reward_key`: each `reward` key takes a spec or the name of a scored reward),
    tools imported, selections parsed as one SELECT each."""
    score = settings.score
    checks: list[tuple[str, Callable[[], Any]]] = [
        *((f"score.rewards[{i}]", partial(resolve_reward_key, spec)) for i, spec in enumerate(score.rewards)),
        (
            "score.reward",
            partial(resolve_reward_key, score.reward, score.rewards, combined=bool(score.weights)),
        ),
    ]
    checks += [(f"score.weights.{key}", partial(_check_weight, key, score.rewards)) for key in score.weights]
    if settings.evaluate.reward:
        checks.append(
            ("evaluate.reward", partial(resolve_reward_key, settings.evaluate.reward, score.rewards))
        )
    if "ruler" in (*score.rewards, settings.evaluate.reward):
        checks.append(("judge.model", partial(_check_judge_model, settings.judge.model)))
    checks += [
        (f"tools.tool[{i}]", partial(CallableTools.from_specs, [spec]))
        for i, spec in enumerate(settings.tools.tool)
    ]
    catalog = _SchemaCatalog()
    checks += [
        (f"select.{name}", partial(catalog.check, getattr(settings.select, name), column))
        for name, column in SELECTED.items()
    ]
    return checks


#: The id column each `[select]` query returns (what its stage reads).
SELECTED = {
    "scenarios": "trajectory_id",
    "replay": "scenario_id",
    "sft": "trajectory_id",
    "evaluate": "scenario_id",
}


class _SchemaCatalog:
    """The lake's views over no data, opened on first use: a selection binds against them as it
    will against any lake (same tables, columns and types), without reading the configured lake,
    which may be large, remote, or not written yet."""

    def __init__(self) -> None:
        self.con: duckdb.DuckDBPyConnection | None = None

    def check(self, sql: str, column: str) -> None:
        _check_selection(sql)
        if self.con is None:
            with tempfile.TemporaryDirectory() as folder:  # never written: the views are the schema's
                self.con = connect(os.path.join(folder, "lake"), read_only=True)
        try:
            check_selection(self.con, sql, column)
        except SelectionError as exc:
            raise ValueError(str(exc).splitlines()[0]) from None


def _check_judge_model(model: str) -> None:
    if not model:
        raise ValueError(
            "RULER is scored and no judge model is named (a hosted judge costs money: no default)"
        )


def _check_weight(key: str, rewards: list[str]) -> None:
    try:
        spec: str | None = resolve_reward_key(key, rewards)[0]
    except RewardSpecError:
        spec = None
    if spec not in (*rewards, "ruler"):
        raise ValueError(f"not a scored reward; rewards: {', '.join(rewards)}")


def _check_selection(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ValueError(f"the SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise ValueError("give one SELECT statement")
