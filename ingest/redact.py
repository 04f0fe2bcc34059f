"""Redaction applied to span rows before anything (spool or lake) is written.

Secrets are always removed; emails and phone numbers when configured; then an optional
user function sees every remaining text value. The built-in rules run as RE2 regular
expressions over whole Arrow string columns (`pyarrow.compute.replace_substring_regex`),
so redaction costs one vectorised pass per rule, not a Python call per attribute.
Replacements never contain quotes or backslashes, so JSON text stays valid JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

# (name, RE2 pattern, replacement). Order matters: URL credentials before emails.
SECRET_RULES: tuple[tuple[str, str, str], ...] = (
    ("url_password", r"(://[^/\s:@\"\\]+:)[^@\s/\"\\]+@", r"\1[REDACTED]@"),
    ("bearer_token", r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*", r"\1 [REDACTED]"),
    ("api_key", r"\b(?:sk|pk|rk)-(?:proj-|ant-|lf-|live-|test-)?[A-Za-z0-9_\-]{16,}", "[REDACTED:api_key]"),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "[REDACTED:aws_key]"),
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", "[REDACTED:github_token]"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "[REDACTED:slack_token]"),
    ("google_api_key", r"\bAIza[0-9A-Za-z\-_]{35}\b", "[REDACTED:api_key]"),
    (
        "secret_field",
        r"(?i)(\"[A-Za-z0-9_.\-]*(?:api[_\-]?key|password|passwd|secret|access[_\-]?token|auth[_\-]?token|authorization)\"\s*:\s*)\"(?:[^\"\\]|\\.)*\"",
        r'\1"[REDACTED]"',
    ),
)
EMAIL_RULE = (
    "email",
    r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
    "[REDACTED:email]",
)
PHONE_RULE = (
    "phone",
    r"(?:\+\d{1,3}[\s.\-]?)?(?:\(\d{2,4}\)|\d{2,4})[\s.\-]\d{3,4}[\s.\-]\d{3,4}\b",
    "[REDACTED:phone]",
)
REDACTED_COLUMNS = ("attributes", "events", "resource", "status_message")

# A cheap superset of where the secret rules can match (mostly literals, which RE2 scans
# several times faster than the full rules): rows it misses cannot hold a secret the
# rules would find, rows it hits get the full rules. Secret-named fields need the closing
# quote, so `gen_ai.usage.input_tokens` on every chat span does not trigger the slow path.
SECRET_PREFILTER = (
    r"sk-|pk-|rk-|AKIA|ASIA|gh[pousr]_|xox[abposr]-|AIza|(?i:bearer|basic)\s"
    r"|://[^/\s:@\"\\]+:[^@\s/\"\\]+@"
    r"|(?i:(?:api[_\-]?key|password|passwd|secret|access[_\-]?token|auth[_\-]?token|authorization)\")"
)


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


def any_rule_pattern(rules: list[tuple[str, str, str]]) -> str:
    """One RE2 alternation matching wherever any rule would: a single pass finds the rows to fix."""
    return "|".join(_scoped(pattern) for _, pattern, _ in rules)


def _prefilter(config: RedactionConfig) -> str:
    rules = config.rules()
    return "|".join([SECRET_PREFILTER, *(_scoped(p) for _, p, _ in rules[len(SECRET_RULES) :])])


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
    if hits is None:
        hits = pc.fill_null(pc.match_substring_regex(column, pattern=_prefilter(config)), False)
    if pc.any(hits).as_py():
        subset = column.filter(hits)
        for _, pattern, replacement in config.rules():
            subset = pc.replace_substring_regex(subset, pattern=pattern, replacement=replacement)
        column = pc.replace_with_mask(column, hits, subset)
    if config.function is not None:
        fn = config.function
        values = [None if v is None else fn(v) for v in column.to_pylist()]
        column = pa.array(values, type=pa.string())
    return column


def redact_table(table: pa.Table, config: RedactionConfig | None) -> pa.Table:
    """The table with its text columns redacted (secrets always, even with `config=None`).

    The prefilter runs once over all text columns together: RE2 builds its automaton per
    call, which for a request's worth of rows costs more than the scan itself.
    """
    config = config or RedactionConfig()
    names = [n for n in REDACTED_COLUMNS if n in table.column_names]
    if not table.num_rows or not names:
        return table
    columns = [table.column(n).combine_chunks() for n in names]
    hits = pc.fill_null(
        pc.match_substring_regex(pa.concat_arrays(columns), pattern=_prefilter(config)), False
    )
    if config.function is None and not pc.any(hits).as_py():
        return table
    offset = 0
    for name, column in zip(names, columns, strict=True):
        index = table.column_names.index(name)
        redacted = redact_column(column, config, hits.slice(offset, len(column)))
        table = table.set_column(index, table.schema.field(index), redacted)
        offset += len(column)
    return table


def redact_text(text: str, config: RedactionConfig | None = None) -> str:
    """One string redacted with the same rules (used for score comments and tests)."""
    return redact_column(pa.array([text]), config or RedactionConfig()).to_pylist()[0]
