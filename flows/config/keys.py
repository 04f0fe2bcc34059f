"""Every configuration key as its section declares it: the TOML key, default, help and
environment variable, read from the dataclass fields of `Settings`' sections.

Reading them imports nothing heavy: the sections are plain dataclasses. TRL's fields
(`[train.sft]`, `[train.grpo]`) are TRL's, and their defaults and help are read from TRL
only when asked (`describe(trl=True)`: the docs site), so `trajlake config` stays fast.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import typing
from dataclasses import dataclass
from typing import Any

from flows.config.naming import declared_variables, section_fields, variable_of
from flows.config.trainers import TRAINERS


@dataclass(frozen=True)
class Key:
    """One key of the configuration."""

    key: str  # the TOML key (`train.sft.learning_rate`; `..._env` for a secret's variable)
    default: Any  # the declared default (a secret: the variable that holds it by default)
    help: str  # the first sentence of the declared help
    variable: str  # the environment variable that overrides it
    type: Any = None  # the declared type (None: TRL's, not read)
    path: str = ""  # the key of the field (`judge.api_key` for `judge.api_key_env`)
    secret: bool = False


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<=[a-z0-9)`'\]])\. (?=[A-Z`])")


def first_sentence(text: str) -> str:
    """The first sentence of a (possibly long, TRL-style) help text.

    >>> first_sentence("Overrides `num_train_epochs`. If set to a positive number, ...")
    'Overrides `num_train_epochs`.'
    >>> first_sentence("Model name (e.g. `o3`, or a served one). More.")
    'Model name (e.g. `o3`, or a served one).'
    """
    text = " ".join(text.split())
    match = _SENTENCE_END.search(text)
    return text if match is None else text[: match.start() + 1]


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def describe(*, trl: bool = False) -> list[Key]:
    """Every key, in section order; `trl`: TRL's defaults and help too (imports TRL)."""
    from flows.config.root import DERIVED, Settings  # every library's section: not for `first_sentence`

    declared = {key: variable for variable, key in declared_variables(Settings).items()}
    rows: list[Key] = []
    for key, f, tp in section_fields(Settings):
        if dataclasses.is_dataclass(tp) or key in DERIVED:
            continue  # a sub-table (its keys follow), or a field another key sets
        extra = f" Environment: `${declared[key]}`." if key in declared else ""
        text = first_sentence(f.metadata.get("help", "")) + extra
        if "env" in f.metadata:
            name = f"{key}_env"
            rows.append(Key(name, f.metadata["env"], text, variable_of(name), str, key, secret=True))
        else:
            rows.append(Key(key, default_of(f), text, declared.get(key, variable_of(key)), tp, key))
    rows += trainer_keys(trl=trl)
    return rows


def trainer_keys(*, trl: bool) -> list[Key]:
    """The keys of `[train.sft]` and `[train.grpo]`: TRL's fields a user sets in the file."""
    rows = []
    for trainer, (module, name, names) in TRAINERS.items():
        fields: dict[str, dataclasses.Field[Any]] = {}
        hints: dict[str, Any] = {}
        if trl:
            cls = getattr(importlib.import_module(module), name)
            fields = {f.name: f for f in dataclasses.fields(cls)}
            hints = typing.get_type_hints(cls)
        for field_name in names:
            key = f"train.{trainer}.{field_name}"
            if field_name in fields:
                f = fields[field_name]
                text = first_sentence(f.metadata.get("help", "")) or f"TRL's `{name}.{field_name}`."
                rows.append(Key(key, default_of(f), text, variable_of(key), hints[field_name], key))
            else:
                text = f"TRL's `{name}.{field_name}` (its default and meaning: `trajlake train {trainer} --help`)."
                rows.append(Key(key, "(TRL's)", text, variable_of(key), None, key))
    return rows
