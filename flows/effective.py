"""What `trajlake config` shows: every key, the value in effect and where it came from.

The keys, defaults and help texts are the libraries' declarations (`flows.config.describe`),
but reading them imports every library's config class, TRL's among them (4-6 s of torch
and PEFT imports). They only change when trajlake or a library does, so they are kept in
a cache file keyed by the installed versions and the source files of trajlake's packages;
the values come from `trajlake.toml` and the environment as written, so showing them
imports nothing heavy. A value a library would refuse is still refused by every command
(and `trajlake config --check` builds every table to say so).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from flows.config import DEFAULT_CONFIG_FILE, declared_variables, read_sources
from flows.settings import derived_variable, table_at

PACKAGES = ("flows", "training", "judging", "ingest", "store")  # trajlake's own, whose files key the cache
LIBRARIES = ("trl", "transformers", "peft", "torch", "trajlake")


@dataclass(frozen=True)
class Described:
    """One key as the libraries declare it."""

    key: str  # the TOML key (`train.sft.learning_rate`; `..._env` for a secret's variable)
    default: str  # its default, as Python writes it
    help: str
    variable: str  # the environment variable that overrides it


@dataclass(frozen=True)
class InEffect:
    """One key as a command would read it now."""

    key: str
    value: str
    source: str  # `default`, the config file's path, or `$VARIABLE`
    help: str


def cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "trajlake" / "settings.json"


def fingerprint() -> str:
    """Changes when trajlake's sources or a library that declares settings changes."""
    digest = hashlib.sha256()
    for name in LIBRARIES:
        try:
            digest.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=-;".encode())
    root = Path(__file__).resolve().parents[1]
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}:{stat.st_mtime_ns}:{stat.st_size};".encode())
    return digest.hexdigest()


def described(*, refresh: bool = False) -> list[Described]:
    """Every key with its default, help and variable: from the cache when it is current."""
    from flows.config import describe

    path, key = cache_path(), fingerprint()
    if not refresh:
        try:
            cached = json.loads(path.read_text())
            if cached.get("fingerprint") == key:
                return [Described(**row) for row in cached["keys"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no cache, an old one or a torn one: describe again
    declared = {key: variable for variable, key in declared_variables().items()}
    rows = [
        Described(name, default, text, declared.get(name.removesuffix("_env"), derived_variable(name)))
        for name, default, text in describe()
    ]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps({"fingerprint": key, "keys": [asdict(r) for r in rows]}))
        temp.replace(path)
    except OSError:
        pass  # a read-only home: describe again next time
    return rows


def _lookup(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """Whether `key` is set in parsed TOML `data`, and its value."""
    table, _, name = key.rpartition(".")
    found = table_at(data, table, "trajlake.toml")
    return name in found, found.get(name)


def in_effect(environ: Mapping[str, str] | None = None) -> list[InEffect]:
    """Each key's value as commands read it (environment > config file > default) and its source."""
    environ = os.environ if environ is None else environ
    file_only = {k: v for k, v in environ.items() if k == "TRAJLAKE_CONFIG"}
    from_file, _ = read_sources(None, file_only)
    merged, _ = read_sources(None, environ)
    config_file = environ.get("TRAJLAKE_CONFIG") or DEFAULT_CONFIG_FILE
    rows = []
    for row in described():
        present, value = _lookup(merged, row.key)
        if not present:
            rows.append(InEffect(row.key, row.default, "default", row.help))
            continue
        in_file, _ = _lookup(from_file, row.key)
        source = config_file if in_file and row.variable not in environ else f"${row.variable}"
        rows.append(InEffect(row.key, repr(value), source, row.help))
    return rows
