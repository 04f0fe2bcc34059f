"""Import chat-format JSONL files into the lake: every line checked first, then written.

A bad line stops the import before anything is written, with the file and line number and
what is wrong; secrets in the text are redacted as the collector redacts them
(`ingest.redact`); re-importing a file writes the same trajectory ids (an `id` field, or a
digest of the conversation), so it changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

import store
from ingest.errors import MalformedPayload
from ingest.jsonl.convert import LineError, convert
from ingest.redact import RedactionConfig, redact_table
from store.conform import rows_to_batch
from store.schema import TABLES


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote."""

    files: int
    trajectories: int
    feedback: int


def import_files(
    lake: store.Lake | str,
    paths: Sequence[str | os.PathLike[str]],
    redaction: RedactionConfig | None = None,
) -> ImportResult:
    """Import every conversation of `paths` (one JSON object per line; blank lines skipped): the
    trajectories in one commit, then their feedback; nothing at all when any line is bad."""
    now = store.utc_now()
    rows, rewards = [], []
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise MalformedPayload("import file", str(exc), path=str(path)) from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row, reward = convert(json.loads(line), now)
            except (json.JSONDecodeError, LineError) as exc:
                raise MalformedPayload("conversation", str(exc), path=f"{path}:{number}") from None
            rows.append(row)
            if reward is not None:
                rewards.append(reward)
    if rows:
        table = pa.Table.from_batches([rows_to_batch(TABLES["trajectories"], rows)])
        store.write(lake, "trajectories", redact_table(table, redaction))
    if rewards:
        store.write(lake, "rewards", rewards)
    return ImportResult(files=len(paths), trajectories=len(rows), feedback=len(rewards))
