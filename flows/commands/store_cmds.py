"""`trajlake sql`, `tables`: looking at the lake (`maintenance_cmds` tidies it and upgrades it)."""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, lake_settings, resolve_lake
from store.catalog import table_stats
from store.errors import QueryTimeout, ReadOnlyViolation, StoreError
from store.user_sql import local_files_problem, query_lake


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


# What a terminal would act on rather than show: C0 controls but the line break (ESC
# starts `\x1b]52;c;...` clipboard writes, `\x1b[2J` screen clears, OSC 8 links; `\r`
# overwrites a line), DEL, C1 controls (`\x9b` is a one-byte CSI) and the bidirectional
# overrides and isolates that reorder what is shown (Trojan Source). A tab is a control
# character too: rich would expand it, so it is shown as `\t` like the rest.
_TERMINAL_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_control(text: str) -> str:
    r"""`text` with every character a terminal would act on written as its Python escape
    (`\x1b`, `\r`, `\u202e`); line breaks stay line breaks (a cell of several lines)."""
    return _TERMINAL_CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _shown(text: str) -> Text:
    # A `Text`, not a string: rich reads strings as markup, and a message holding
    # `[bold]` or `[/]` would be shown changed (or refused).
    return Text(_escape_control(text))


# The table is for reading in a terminal, as DuckDB's shell shows it: a screenful of rows and
# cells cut to a readable length (rendering 12,000 rows of whole messages took rich 35 s).
TABLE_MAX_ROWS = 40
TABLE_MAX_CELL = 1_000


def _cut(text: str) -> str:
    return text if len(text) <= TABLE_MAX_CELL else f"{text[:TABLE_MAX_CELL]}… ({len(text):,} characters)"


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str, max_rows: int = 0) -> None:
    r"""Write query results to stdout as a rich table, CSV, or a JSON array of objects.

    The table is for a terminal: control characters in a value (escape sequences, `\r`)
    are shown escaped (`\x1b[2J`), never sent to it, and markup-like text as written;
    with `max_rows` it shows that many rows and says how many there were, and it cuts a
    cell past `TABLE_MAX_CELL` characters. CSV and JSON are every row, the values as
    stored, byte for byte (JSON escapes them its own way).
    """
    if fmt == "json":
        objects = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        # `default=str` covers what JSON has no type for (intervals, UUIDs, times).
        sys.stdout.write(json.dumps(objects, ensure_ascii=False, indent=None, default=str) + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([_cell(v) for v in row] for row in rows)
    else:
        shown = rows[:max_rows] if max_rows > 0 else rows
        caption = (
            f"{len(rows):,} rows, the first {len(shown):,} shown (--max-rows 0 shows all; "
            "--format csv or json prints every row whole)"
            if len(shown) < len(rows)
            else None
        )
        table = Table(show_lines=False, caption=caption)
        for column in columns:
            table.add_column(_shown(column))
        for row in shown:
            table.add_row(*(_shown(_cut(_cell(v))) for v in row))
        Console(width=max(120, Console().width)).print(table)


def sql(
    query: Annotated[str, typer.Argument(help="SQL over the lake's views (read-only).")],
    lake: LakeOption = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table, csv or json. The table shows control characters escaped (`\\x1b`, `\\r`) so "
            "content cannot drive the terminal; csv and json write values as stored.",
        ),
    ] = "table",
    max_rows: Annotated[
        int,
        typer.Option(
            "--max-rows",
            min=0,
            help="Rows the table format shows (0: all), as DuckDB's shell does; it says how many there were. "
            "csv and json always print every row.",
        ),
    ] = TABLE_MAX_ROWS,
) -> None:
    """Run read-only SQL against the lake's views (trajectories, messages, rewards, groups, ...)."""
    if fmt not in ("table", "csv", "json"):
        raise fail(f"unknown --format `{fmt}`; use table, csv or json", 2)
    the_lake = resolve_lake(lake, must_exist=True)
    limits = lake_settings()
    try:
        result = query_lake(
            the_lake,
            query,
            timeout_s=limits.sql_timeout_s or None,
            memory_limit=limits.sql_memory_limit or None,
        )
    except (ReadOnlyViolation, QueryTimeout) as exc:
        raise fail(str(exc), 2) from None
    except duckdb.PermissionException as exc:
        raise fail(f"{exc}\n({local_files_problem(the_lake) or 'no file may be opened'})", 2) from None
    except duckdb.IOException as exc:
        if "Permission denied" not in str(exc):
            raise fail(str(exc)) from None
        raise fail(
            f"{exc}\n(`trajlake sql` is read-only: it cannot write, create or remove a file)", 2
        ) from None
    except duckdb.Error as exc:
        # DuckDB's message already carries the query position (`LINE 1: ... ^`).
        raise fail(str(exc)) from None
    except (StoreError, OSError, KeyError, ValueError) as exc:
        raise fail(f"cannot query the lake: {exc}") from None
    except Exception as exc:  # never a traceback for a user's query
        raise fail(f"{type(exc).__name__}: {exc}") from None
    print_rows(result.columns, result.rows, fmt, max_rows)


def tables(lake: LakeOption = None) -> None:
    """Each table's Delta version, rows, files, bytes and newest data (from the tables' logs)."""
    try:
        stats = table_stats(resolve_lake(lake, must_exist=True))
    except (StoreError, OSError) as exc:
        raise fail(f"cannot read the lake: {exc}") from None
    print_rows(
        ["table", "version", "rows", "files", "bytes", "newest_data"],
        [(s.table, s.version, s.rows, s.files, s.bytes, s.newest) for s in stats],
        "table",
    )


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("sql")(sql)
app.command("tables")(tables)
