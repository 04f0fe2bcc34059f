"""Redaction applied to Arrow columns, tables and rows: the rules in one vectorised pass
per rule over the prefilter's rows (see the package docstring, `ingest.redact`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import re2

from ingest.redact.encoded import redact_encoded
from ingest.redact.random_strings import redact_random
from ingest.redact.rules import EMAIL_RULE, PHONE_RULE, SECRET_PREFILTER, SECRET_RULES
from store.schema import ID_COLUMNS

# Columns that hold ids or enum codes the ingest path validated (hex ids, `kind`,
# `status`): never free text, so the redaction pass skips them. Every other string of a
# table, top level or nested (message content, tool-call arguments), is redacted. The same
# set is the only string columns whose min/max values the Delta log keeps (`store.writer`).
NOT_FREE_TEXT = ID_COLUMNS
# How many encodings deep a secret is looked for: a base64 blob passed as a URL parameter
# is two (percent-encoding, then base64), three when a client `\u`-escaped that URL.
MAX_DECODE_DEPTH = 3


@dataclass
class RedactionConfig:
    """What to remove from spans before they are stored."""

    # Secrets (API keys, bearer tokens, passwords in URLs, secret-named fields) are always removed.
    emails: bool = field(default=False, metadata={"help": "Also replace email addresses."})
    phones: bool = field(default=False, metadata={"help": "Also replace phone numbers."})
    function: Callable[[str], str] | None = field(
        default=None,
        metadata={"help": "User function applied to every text value (JSON text of attributes/events) last."},
    )

    def rules(self) -> list[tuple[str, str, str]]:
        rules = list(SECRET_RULES)
        if self.emails:
            rules.append(EMAIL_RULE)
        if self.phones:
            rules.append(PHONE_RULE)
        return rules


def _scoped(pattern: str) -> str:
    # A leading `(?i)` applies to the whole expression; inside an alternation it must be scoped.
    return f"(?i:{pattern[4:]})" if pattern.startswith("(?i)") else f"(?:{pattern})"


def _prefilter(config: RedactionConfig) -> str:
    rules = config.rules()
    return "|".join([SECRET_PREFILTER, *(_scoped(p) for _, p, _ in rules[len(SECRET_RULES) :])])


@functools.lru_cache(maxsize=8)
def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.max_mem = 64 << 20  # room for the DFA of the whole alternation: it never falls back to the NFA
    return re2.compile(pattern.encode(), options)


def prefilter_hits(column: pa.Array, config: RedactionConfig) -> pa.BooleanArray:
    """Which values of a string array may hold a secret: the prefilter, in one scan of the
    array's contiguous UTF-8 data.

    The scan is google-re2 with the pattern compiled once per process, not Arrow's
    `match_substring_regex`, which compiles its RE2 and rebuilds the DFA on every call:
    for a request's worth of rows that warm-up cost more than the scan. Matches are rare;
    each one marks every value it touches (a match running over a value boundary is a
    false alarm, never a miss: a real match it hides is a value it touches).
    """
    offset_type: type[np.signedinteger[Any]]
    if pa.types.is_large_string(column.type):
        offset_type = np.int64
    else:
        column = column.cast(pa.string()) if not pa.types.is_string(column.type) else column
        offset_type = np.int32
    hits = np.zeros(len(column), dtype=bool)
    _, offsets_buffer, data = column.buffers()
    if data is None or not len(column):
        return pa.array(hits)
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[
        column.offset : column.offset + len(column) + 1
    ]
    start = int(offsets[0])
    blob = memoryview(data)[start : int(offsets[-1])]
    for match in _compiled(_prefilter(config)).finditer(blob):
        first = np.searchsorted(offsets, start + match.start(), side="right") - 1
        last = np.searchsorted(offsets, start + max(match.end() - 1, match.start()), side="right") - 1
        hits[first : last + 1] = True
    return pa.array(hits)


def redact_column(
    column: pa.ChunkedArray | pa.Array, config: RedactionConfig, hits: pa.Array | None = None
) -> pa.Array:
    """One string column with every configured rule applied.

    Most rows hold no secret, so one combined pass marks the rows that may (`hits`, when
    the caller has not already computed it) and the rule-by-rule replacement runs on those
    rows only.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = _redact_secrets(column, config, hits, depth=0)
    if config.function is not None:
        fn = config.function
        values = [None if v is None else fn(v) for v in column.to_pylist()]
        column = pa.array(values, type=pa.string())
    return column


def _redact_secrets(column: pa.Array, config: RedactionConfig, hits: pa.Array | None, depth: int) -> pa.Array:
    """Encoded text (decoded, and redacted by this same function one level deeper), then
    the rules, then bare random strings, on the prefilter's rows only. Encoded text goes
    first so that a rule matching part of it (`?key=` and the first line of a wrapped
    base64 block) does not leave the rest undecodable."""
    if hits is None:
        hits = prefilter_hits(column, config)
    if not pc.any(hits).as_py():
        return column
    subset = column.filter(hits)
    if depth < MAX_DECODE_DEPTH:
        subset = redact_encoded(subset, lambda decoded: _redact_secrets(decoded, config, None, depth + 1))
    for _, pattern, replacement in config.rules():
        subset = pc.replace_substring_regex(subset, pattern=pattern, replacement=replacement)
    return pc.replace_with_mask(column, hits, redact_random(subset))


def _text_leaves(array: pa.Array) -> tuple[list[pa.Array], Callable[[list[pa.Array]], pa.Array]]:
    """The string arrays inside `array` (itself, or nested in lists and structs), and how to
    put redacted ones back in their place."""
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return [array], lambda new: new[0]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = array.offsets
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        if first:
            offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
        leaves, rebuild = _text_leaves(array.values.slice(first, last - first))
        mask = array.is_null() if array.null_count else None
        return leaves, lambda new: type(array).from_arrays(offsets, rebuild(new), type=kind, mask=mask)
    if pa.types.is_struct(kind):
        parts = [_text_leaves(array.field(i)) for i in range(kind.num_fields)]
        mask = array.is_null() if array.null_count else None

        def rebuild_struct(new: list[pa.Array]) -> pa.Array:
            children, at = [], 0
            for leaves, rebuild in parts:
                children.append(rebuild(new[at : at + len(leaves)]))
                at += len(leaves)
            return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)

        return [leaf for leaves, _ in parts for leaf in leaves], rebuild_struct
    return [], lambda new: array


def text_columns(schema: pa.Schema) -> list[str]:
    """The columns of `schema` that hold free text (strings, or strings nested in lists/structs)."""

    def has_text(kind: pa.DataType) -> bool:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return True
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return has_text(kind.value_type)
        return pa.types.is_struct(kind) and any(has_text(f.type) for f in kind)

    return [f.name for f in schema if f.name not in NOT_FREE_TEXT and has_text(f.type)]


def redact_table(table: pa.Table, config: RedactionConfig | None) -> pa.Table:
    """The table with every free-text value redacted (secrets always, even with `config=None`):
    every string column but ids and enum codes (`NOT_FREE_TEXT`), and strings nested in
    list and struct columns (trajectory messages, tool calls).

    The prefilter scans each text array's data where it lies (no concatenated copy); its RE2
    is compiled once per process, so a scan per array costs no automaton rebuild.
    """
    config = config or RedactionConfig()
    names = text_columns(table.schema)
    if not table.num_rows or not names:
        return table
    # Chunk by chunk (a group commit's table is one chunk per request): nothing is copied
    # unless a value needs redacting.
    parts = {name: [_text_leaves(chunk) for chunk in table.column(name).chunks] for name in names}
    hits = {
        name: [[prefilter_hits(leaf, config) for leaf in leaves] for leaves, _ in chunks]
        for name, chunks in parts.items()
    }
    found = any(pc.any(h).as_py() for chunks in hits.values() for leaves in chunks for h in leaves)
    if config.function is None and not found:
        return table
    for name, chunks in parts.items():
        redacted = [
            rebuild([redact_column(leaf, config, h) for leaf, h in zip(leaves, leaf_hits, strict=True)])
            for (leaves, rebuild), leaf_hits in zip(chunks, hits[name], strict=True)
        ]
        index = table.column_names.index(name)
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.chunked_array(redacted, type=field.type))
    return table


def redact_rows(rows: list[dict[str, Any]], config: RedactionConfig | None = None) -> list[dict[str, Any]]:
    """`rows` (dicts of one table's columns) with the free-text values of every column
    redacted, column by column as `redact_table` does; the dicts are updated in place.
    Values that are not strings, or not valid Unicode (left for the writer to refuse), stay.

    >>> redact_rows([{"trace_id": "ab", "explanation": "key sk-proj-0123456789abcdefghij"}])
    [{'trace_id': 'ab', 'explanation': 'key [REDACTED:api_key]'}]
    """
    names = [
        name
        for name in dict.fromkeys(k for row in rows for k in row)
        if name not in NOT_FREE_TEXT and any(isinstance(row.get(name), str) for row in rows)
    ]
    if not names:
        return rows
    arrays = {}
    for name in names:
        values = [v if isinstance(v := row.get(name), str) else None for row in rows]
        try:
            arrays[name] = pa.array(values, pa.string())
        except (UnicodeEncodeError, pa.ArrowInvalid):
            arrays[name] = pa.array([v if v is None or _encodable(v) else None for v in values], pa.string())
    table = redact_table(pa.table(arrays), config)
    for name in names:
        for row, old, new in zip(rows, arrays[name].to_pylist(), table.column(name).to_pylist(), strict=True):
            if old is not None and new != old:
                row[name] = new
    return rows


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def redact_text(text: str, config: RedactionConfig | None = None) -> str:
    """One string redacted with the same rules (used for score comments and tests)."""
    return redact_column(pa.array([text]), config or RedactionConfig()).to_pylist()[0]
