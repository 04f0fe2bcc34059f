"""Policy names: what `trajectories.policy` records, the same wherever the files live.

A replayed trajectory names the policy that sampled it, and that name is hashed into its
group id (`training.replay.rows.group_id_for`), compared by GRPO's staleness bound
(`training.grpo_rows.policy_lineage`) and shown by the report. A path makes a poor name:
a copied lake or a moved adapter would get other group ids and look stale, and the report
would show temporary folders. So a policy is named by what it is:

- the base model: a hub id or served name as is (`Qwen/Qwen2.5-0.5B-Instruct`); a local
  folder by its folder name (`tiny-qwen`), a Hugging Face cache snapshot by its repo id;
- an adapter trained by trajlake: the run id of its run record (`trajlake_run.json`),
  `<stage>-<UTC start>-<random>` such as `grpo-20261126T101500-1a2b3c4d`, or the
  `run_id` a run was given. A published version in the registry holds a copy of the same
  record, so it keeps its name (its `name:version` is in the `adapters` row, whose
  `run_id` joins it);
- any other adapter: its folder name and a digest of its files (`my-lora@3f2a9c1e`), so
  a copy anywhere has the same name; one this machine cannot read (a URL, a path only a
  remote server sees) is named by its folder name and a digest of the path as given.

A policy with an adapter is `<base model name>+<adapter name>` (the format: `store.policy_names`). The paths remain with every
trajectory: `model` holds the base model as given and `metadata.adapter` the adapter path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from store.policy_names import join_policy
from training.models.adapters import ADAPTER_FILES, RUN_RECORD

DIGEST_CHARS = 8


def is_path(text: str) -> bool:
    """Whether a model or adapter reference is a local path rather than a hub id or served name.

    A hub id has at most one slash (`org/name`); a path starts with `/`, `.` or `~`, or has
    several components. Decided on the text alone, so the answer does not depend on the
    current directory.

    >>> [is_path(t) for t in ("Qwen/Qwen2.5-0.5B", "gpt2", "/models/tiny", "./tiny", "runs/sft/adapter")]
    [False, False, True, True, True]
    """
    return text.startswith(("/", ".", "~")) or "\\" in text or text.strip("/").count("/") > 1


def folder_name(path: str) -> str:
    """The human part of a local path: a hub cache snapshot's repo id, else the last folder's name.

    >>> folder_name("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/a1b2c3")
    'Qwen/Qwen2.5-0.5B'
    >>> folder_name("/tmp/demo/model/")
    'model'
    """
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")
    if not parts or parts[-1] in (".", ".."):  # `.` names the current folder: its own name
        return Path(path).expanduser().resolve().name or path
    return parts[-1]


def model_name(model: str) -> str:
    """The base model's name: a hub id or served name as is, a local folder by its folder name.

    >>> model_name("Qwen/Qwen2.5-0.5B-Instruct"), model_name("/tmp/work/tiny-qwen")
    ('Qwen/Qwen2.5-0.5B-Instruct', 'tiny-qwen')
    """
    return folder_name(model) if is_path(model) or "://" in model else model


def record_name(record: Mapping[str, Any]) -> str | None:
    """The adapter name a run record gives: its run id, or the `name` an external parent carries."""
    return record.get("run_id") or record.get("name") or None


def files_digest(folder: Path) -> str | None:
    """A short digest of an adapter folder's PEFT files (names and bytes), or None without any."""
    present = [folder / name for name in ADAPTER_FILES if (folder / name).is_file()]
    if not present:
        return None
    digest = hashlib.sha256()
    for path in present:
        digest.update(path.name.encode() + b"\x00")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:DIGEST_CHARS]


def adapter_label(adapter: str) -> str:
    """The adapter's name: its run record's run id; else its folder name `@` a digest of its files
    (of the path as given, when the folder cannot be read here)."""
    folder = Path(adapter).expanduser() if "://" not in adapter else None
    record = _run_record(folder) if folder is not None else None
    if record and record_name(record):
        return str(record_name(record))
    digest = files_digest(folder) if folder is not None and folder.is_dir() else None
    if digest is None:  # nothing to read here: the path is all there is to go on
        digest = hashlib.sha256(adapter.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{folder_name(adapter)}@{digest}"


def policy_name(model: str, adapter: str | None = None) -> str:
    """What `trajectories.policy` records: the base model's name, `+` the adapter's when there is one.

    >>> policy_name("Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen/Qwen2.5-0.5B-Instruct'
    """
    base = model_name(model)
    return join_policy(base, adapter_label(adapter) if adapter else None)


def _run_record(folder: Path) -> dict[str, Any] | None:
    path = folder / RUN_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):  # a damaged record: the adapter is then named by its files
        return None
    return record if isinstance(record, dict) else None
