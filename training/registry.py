"""The adapter registry: `<registry>/<name>/v<N>/` folders indexed by the `adapters` table.

A published version is a folder holding the PEFT files, the tokenizer, the run record and
`manifest.json`, which is written last (its presence means the version is complete, as
nanochat's manifest-last download). The registry defaults to `<lake>/_registry` and can
be any local path or fsspec URL. Aliases (`latest`, `production`, ...) live in the rows'
`aliases` lists; `alias_moves` says which rows lose an alias a new version takes, so
one `store.writer.write` moves them atomically.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from store.catalog.connection import connect
from store.lake import Lake
from training.errors import AdapterNotFound

REGISTRY_DIR = "_registry"
MANIFEST = "manifest.json"
PRODUCTION = "production"
LATEST = "latest"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def registry_url(lake: Lake, registry: str | None) -> str:
    """The registry root: the given path/URL, else `<lake>/_registry`."""
    if registry:
        return registry if "://" in registry else str(Path(registry).expanduser().absolute())
    return lake.url(REGISTRY_DIR)


def adapter_rows(lake: Lake | str, name: str | None = None) -> list[dict[str, Any]]:
    """Current rows of the `adapters` table (one per name/version), optionally for one name."""
    con = connect(lake)
    where, params = ("WHERE name = $name", {"name": name}) if name else ("", None)
    table = con.sql(
        f"SELECT * EXCLUDE (_written_at) FROM adapters {where} ORDER BY name, version", params=params
    )
    return table.to_arrow_table().to_pylist()


def resolve_adapter(lake: Lake | str, ref: str) -> dict[str, Any]:
    """The `adapters` row for `name`, `name:<version>` or `name:<alias>` (default alias `latest`)."""
    name, _, which = ref.partition(":")
    which = which or LATEST
    rows = adapter_rows(lake, name)
    if not rows:
        known = sorted({r["name"] for r in adapter_rows(lake)})
        raise AdapterNotFound(
            f"no adapter named `{name}` in the registry; published: {', '.join(known) or 'none'}", name=name
        )
    for row in rows:
        if (which.isdigit() and row["version"] == int(which)) or which in (row["aliases"] or []):
            return row
    raise AdapterNotFound(
        f"`{name}` has no version or alias `{which}`; versions: "
        + ", ".join(
            f"v{r['version']}" + (f" ({', '.join(r['aliases'])})" if r["aliases"] else "") for r in rows
        ),
        name=name,
        version=which,
    )


def alias_moves(rows: Sequence[dict[str, Any]], aliases: Sequence[str]) -> list[dict[str, Any]]:
    """Rows that must lose an alias the new version takes (rewritten with it removed).

    >>> alias_moves([{"version": 1, "aliases": ["latest", "production"]}], ["latest"])
    [{'version': 1, 'aliases': ['production']}]
    """
    moved = []
    for row in rows:
        keep = [a for a in row.get("aliases") or [] if a not in aliases]
        if keep != list(row.get("aliases") or []):
            moved.append({**row, "aliases": keep})
    return moved


def claim_version(fs: fsspec.AbstractFileSystem, root: str, name: str, start: int) -> tuple[int, str]:
    """Create `<root>/<name>/v<N>` for the first free N >= start (never reuses a version folder).

    Every version gets a fresh path: vLLM keys its prefix cache on the adapter path, so
    overwriting a served version in place could reuse stale KV blocks.
    """
    version = start
    while True:
        path = f"{root}/{name}/v{version}"
        if not fs.exists(path):
            try:
                if isinstance(fs, LocalFileSystem):
                    os.makedirs(path, exist_ok=False)  # atomic claim: a concurrent publisher gets the next N
                else:
                    fs.makedirs(path, exist_ok=True)  # object stores have no directories to race on
                return version, path
            except FileExistsError:
                pass
        version += 1


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of a published version (raises `AdapterNotFound` when the version is incomplete)."""
    fs, p = fsspec.core.url_to_fs(path)
    if not fs.exists(f"{p}/{MANIFEST}"):
        raise AdapterNotFound(f"`{path}` has no {MANIFEST}: not a complete published version", name=path)
    with fs.open(f"{p}/{MANIFEST}") as f:
        return json.loads(f.read())


def lineage_versions(lake: Lake | str) -> dict[str, set[int]]:
    """Per table, the versions published adapters were trained on (vacuum keeps their files)."""
    lake = Lake.of(lake)
    if not lake.has_table("adapters"):
        return {}
    out: dict[str, set[int]] = {}
    for row in adapter_rows(lake):
        for stage in json.loads(row["data"] or "[]"):
            for table, entry in (stage.get("table_versions") or {}).items():
                if entry.get("version") is not None:
                    out.setdefault(table, set()).add(int(entry["version"]))
    return out


def stage_lineage(lake: Lake | str, ref: str, stage: str) -> dict[str, Any]:
    """The lineage a published adapter (`name:version|alias`) recorded for its last `stage` run."""
    row = resolve_adapter(lake, ref)
    chain = [entry for entry in json.loads(row["data"] or "[]") if entry.get("stage") == stage]
    if not chain:
        stages = ", ".join(e.get("stage", "?") for e in json.loads(row["data"] or "[]")) or "none"
        raise AdapterNotFound(
            f"`{ref}` has no `{stage}` stage in its lineage (it has: {stages})", name=ref, version=stage
        )
    return chain[-1]
