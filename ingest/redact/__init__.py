"""Redaction applied to rows before anything (spool or lake) is written.

Secrets are always removed (the formats in `ingest.redact.rules`); emails and phone
numbers when configured; then an optional user function sees every remaining text
value. Every free-text column of every table ingest writes goes through it: spans (the
collector, once per spool group commit; the Langfuse puller and importer), rewards
(pushed and pulled scores) and assembled trajectories. The built-in rules run as RE2 regular
expressions over whole Arrow string columns (`pyarrow.compute.replace_substring_regex`),
so redaction costs one vectorised pass per rule, not a Python call per attribute.
Replacements never contain quotes or backslashes, so JSON text stays valid JSON.
Last, bare random strings with no label (an AWS secret access key pasted alone): exactly
40 base64-alphabet characters standing alone, mixing cases and digits, not hex, with high
Shannon entropy (`ingest.redact.random_strings`; `rules.looks_random` explains the trade against ids).
A run that is base64 of text is not one (the encoded pass below has read it).
That check is Python, so it runs only on the rows the prefilter sends to the rules (any
run of 40 such characters is a prefilter hit): rows of ordinary text never reach it.
Before the rules, secrets behind percent-encoding, JSON `\\u` escapes, hex or base64
(`ingest.redact.encoded`): the encoded runs of the prefilter's rows are decoded,
redacted by the same rules, and written back encoded.

Modules: `rules` (the formats and the prefilter), `apply` (columns, tables, rows),
`encoded` with `json_escapes`, `hex_runs`, `base64_runs` (secrets behind an encoding),
`random_strings` (bare random keys).
"""

from __future__ import annotations

from ingest.redact.apply import (
    MAX_DECODE_DEPTH,
    NOT_FREE_TEXT,
    RedactionConfig,
    prefilter_hits,
    redact_column,
    redact_rows,
    redact_table,
    redact_text,
    text_columns,
)

__all__ = [
    "MAX_DECODE_DEPTH",
    "NOT_FREE_TEXT",
    "RedactionConfig",
    "prefilter_hits",
    "redact_column",
    "redact_rows",
    "redact_table",
    "redact_text",
    "text_columns",
]
