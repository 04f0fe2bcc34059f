"""Exceptions of the store package. Context lives in attributes so callers can branch on it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable


class StoreError(Exception):
    """Base class for every error raised by `store`."""


class SettingError(ValueError):
    """A setting holds a value outside what it allows; nothing has run.

    The base of the configuration errors of every package (judging's `ConfigValueError`, the
    collector's `CollectorSettingError`, a flow table's check, flows' `ConfigError` and
    `StageError`, training's `BadHyperparameter`, replay's `ReplaySetupError` and
    `BadSamplingParams`). `flows.config` names the failing TOML key from `field` alone.
    `field` is the field's name in the dataclass that declares it (dotted for a nested one:
    `sampling.temperature`); None when no one field is at fault.
    """

    # also the values of a subclass whose other base's __init__ runs instead (replay's errors)
    field: str | None = None
    value: object = None

    def __init__(self, message: str, *, field: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


#: One check of a setting: (its field, dotted for a nested one; whether its value is allowed;
#: what is allowed, as the message says it: ">= 1", "one of a, b").
SettingRule = tuple[str, bool, str]


def check_settings(
    settings: object, *rules: SettingRule, error: Callable[..., SettingError] = SettingError
) -> None:
    """The one way a settings dataclass checks itself (in `__post_init__`): raise `error` (a
    `SettingError`, called with the message, `field` and `value`) for the first rule that does
    not hold, saying "`field` must be <allowed>, got <value>".

    >>> class Replay:
    ...     group_size = 1
    >>> try:
    ...     check_settings(Replay(), ("group_size", Replay.group_size >= 2, ">= 2"))
    ... except SettingError as error:
    ...     print(error.field, "|", error)
    group_size | `group_size` must be >= 2, got 1
    """
    for name, holds, allowed in rules:
        if not holds:
            value: object = settings
            for part in name.split("."):
                value = getattr(value, part)
            raise error(f"`{name}` must be {allowed}, got {value!r}", field=name, value=value)


_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


def is_host(host: str) -> bool:
    """Whether `host` can name an address to bind: an IP address (IPv6 with or without
    brackets) or a host name (dot-separated labels of letters, digits and hyphens).

    >>> is_host("127.0.0.1"), is_host("[::1]"), is_host("localhost"), is_host("not a host!")
    (True, True, True, False)
    """
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return len(host) <= 253 and _HOST_NAME.fullmatch(host) is not None


def address_rules(host: str, port: int) -> tuple[SettingRule, SettingRule]:
    """The `check_settings` rules of a server's bind address: `host` an address or name
    (`is_host`), `port` from 0 (any free one) to 65535. A port past it was bound modulo
    65536, and an unparsable host failed in the server's start (exit 3)."""
    return (
        ("host", is_host(host), "an IP address or a host name"),
        ("port", not isinstance(port, bool) and 0 <= port <= 65535, "a port from 0 to 65535"),
    )


class SchemaViolation(StoreError, ValueError):
    """Data offered to a table does not match the table's schema. Nothing was written."""

    def __init__(
        self,
        table: str,
        column: str | None,
        row: int | None,
        reason: str,
        detail: str,
    ) -> None:
        self.table = table
        self.column = column
        self.row = row
        self.reason = reason  # snake_case code: missing_column, wrong_type, null_key, ...
        where = f"`{table}`"
        if column is not None:
            where += f".`{column}`"
        if row is not None:
            where += f" at row {row}"
        super().__init__(f"{where}: {detail}; nothing was written")


class LakeUnusable(StoreError, ValueError):
    """The path given as a lake is not one (a file, or nothing where a lake must exist). Nothing was read."""

    def __init__(self, root: str, detail: str) -> None:
        self.root = root
        super().__init__(detail)


class QueryTimeout(StoreError, TimeoutError):
    """User SQL ran past `lake.sql_timeout_s` and was interrupted."""


class ReadOnlyViolation(StoreError, PermissionError):
    """A statement given to the read-only SQL interface would change something."""

    def __init__(self, statement_type: str, statement: str) -> None:
        self.statement_type = statement_type
        self.statement = statement
        short = " ".join(statement.split())[:80]
        super().__init__(
            f"`trajlake sql` is read-only: a {statement_type} statement is not allowed "
            f"(`{short}`). Only SELECT-like queries (SELECT, WITH, DESCRIBE, SHOW, EXPLAIN) run here."
        )


class CompactionError(StoreError):
    """Compacting a table partition kept losing races with writers. Readers are unaffected:
    the table's current version is untouched, and a later `trajlake compact` retries."""

    def __init__(self, table: str, partition: str, detail: str) -> None:
        self.table = table
        self.partition = partition
        super().__init__(
            f"compacting `{table}` partition `{partition}` failed: {detail}; the table is unchanged, "
            "nothing was lost; rerun `trajlake compact`"
        )


class SelectionError(StoreError, ValueError):
    """A user's selection SQL cannot be used: empty, not read-only, failing, or missing a column."""

    def __init__(self, message: str, *, sql: str, reason: str) -> None:
        self.sql = sql
        self.reason = reason  # snake_case code: empty_sql, not_read_only, bad_sql, missing_column
        super().__init__(message)


class DataErased(StoreError, LookupError):
    """A table version read by time travel is gone: `forget` or retention erased the history
    before it (the `erasures` table says when and why)."""

    def __init__(self, table: str, version: int, earliest: int | None) -> None:
        self.table = table
        self.version = version
        self.earliest = earliest
        oldest = (
            f"the oldest readable version is {earliest}" if earliest is not None else "no version is left"
        )
        super().__init__(
            f"version {version} of `{table}` is gone: its data was erased (`trajlake forget` or retention, "
            f"see the `erasures` table); {oldest}"
        )


class LegacyRows(StoreError, ValueError):
    """Rows written by an older trajlake hold what is read here as JSON text only, not yet in the
    typed column that replaced it; nothing was read. `trajlake migrate` fills the column once."""

    def __init__(self, table: str, column: str, rows: int, what: str) -> None:
        self.table = table
        self.column = column
        self.rows = rows
        super().__init__(
            f"{rows} `{table}` row(s) ({what}) were written by an older trajlake: their `{column}` is "
            "in a JSON text column only and nothing was read; run `trajlake migrate` once to fill "
            f"`{table}.{column}` from it, then rerun"
        )
