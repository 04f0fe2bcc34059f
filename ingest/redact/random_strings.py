"""Bare random strings with no label (an AWS secret access key pasted alone): the last
check of `ingest.redact`, and the only one that is Python rather than RE2, so it runs on
the prefilter's rows only (`ingest.redact.rules.looks_random` explains the trade
against ids)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ingest.redact.base64_runs import is_base64_text
from ingest.redact.rules import BASE64_RUN, RANDOM_LENGTH, RANDOM_REPLACEMENT, looks_random
from ingest.redact.runs import compiled

# A JSON escape whose letter would otherwise start a run (`\nKEY`: the key after a line break).
_ESCAPE_LETTERS = "nrtbf"
# What may lie between two lines of a base64 block: a line break, raw or JSON-escaped.
_LINE_BREAK = frozenset("\\rn\r\n")


def redact_random(values: pa.Array) -> pa.Array:
    """`values` with every bare random secret (`rules.looks_random`) replaced: runs
    last, on the prefilter's rows only, so ordinary rows never reach this Python loop."""
    run = compiled(BASE64_RUN)
    out, changed = [], False
    for value in values.to_pylist():
        if value is not None and run.search(value):
            new = _random_replaced(value, run)
            changed = changed or new != value
            value = new
        out.append(value)
    return pa.array(out, type=values.type) if changed else values


def _random_replaced(value: str, run: Any) -> str:
    parts, at, previous = [], 0, (0, 0)  # the text before, and the previous run's (end, length)
    for match in run.finditer(value):
        start, end = match.start(), match.end()
        if start and value[start - 1] == "\\" and value[start] in _ESCAPE_LETTERS:
            start += 1  # `\nKEY`: the escape's letter belongs to the escape
        token = value[start:end].replace("\\", "")  # `\/` is one `/`
        # The last line of a base64 block (a certificate, a MIME body) follows a longer line
        # across a line break: part of the block, not a key.
        gap = value[previous[0] : start]
        continues_block = previous[1] > RANDOM_LENGTH and bool(gap) and set(gap) <= _LINE_BREAK
        previous = (end, len(token))
        if continues_block or len(token) != RANDOM_LENGTH or value[end : end + 1] == "=":
            continue  # longer (data, not a key), or base64 padding follows: a longer datum
        if looks_random(token) and not is_base64_text(token):
            parts += [value[at:start], RANDOM_REPLACEMENT]
            at = end
    return "".join([*parts, value[at:]]) if parts else value
