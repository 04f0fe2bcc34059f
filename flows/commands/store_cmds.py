"""`trajlake sql`, `trajlake tables`, `trajlake compact`: looking at and tidying the lake."""

from __future__ import annotations

import csv
import json
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.table import Table

from flows.commands.options import LakeOption, fail, resolve_lake
from store import ReadOnlyViolation, StoreError, connect, run_read_only
from store.compact import CompactConfig, compact
from store.stats import table_stats


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


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    """Write query results to stdout as a rich table, CSV, or a JSON array of objects."""
    if fmt == "json":
        objects = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        # `default=str` covers what JSON has no type for (intervals, UUIDs, times).
        sys.stdout.write(json.dumps(objects, ensure_ascii=False, indent=None, default=str) + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([_cell(v) for v in row] for row in rows)
    else:
        table = Table(*columns, show_lines=False)
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        Console(width=max(120, Console().width)).print(table)


def sql(
    query: Annotated[str, typer.Argument(help="SQL over the lake's views (read-only).")],
    lake: LakeOption = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json")] = "table",
) -> None:
    """Run read-only SQL against the lake's views (trajectories, messages, rewards, groups, ...)."""
    if fmt not in ("table", "csv", "json"):
        raise fail(f"unknown --format `{fmt}`; use table, csv or json", 2)
    try:
        con = connect(resolve_lake(lake), read_only=True)
        columns, rows = run_read_only(con, query)
    except ReadOnlyViolation as exc:
        raise fail(str(exc), 2) from None
    except duckdb.Error as exc:
        # DuckDB's message already carries the query position (`LINE 1: ... ^`).
        raise fail(str(exc)) from None
    except (StoreError, OSError, KeyError, ValueError) as exc:
        raise fail(f"cannot query the lake: {exc}") from None
    except Exception as exc:  # never a traceback for a user's query
        raise fail(f"{type(exc).__name__}: {exc}") from None
    print_rows(columns, rows, fmt)


def tables(lake: LakeOption = None) -> None:
    """Each table's rows (deduplicated), files, bytes and newest data."""
    try:
        stats = table_stats(resolve_lake(lake))
    except (StoreError, duckdb.Error, OSError) as exc:
        raise fail(f"cannot read the lake: {exc}") from None
    print_rows(
        ["table", "rows", "files", "bytes", "newest_data"],
        [(s.table, s.rows, s.files, s.bytes, s.newest) for s in stats],
        "table",
    )


def compact_cmd(
    lake: LakeOption = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", "-t", help="Table to compact (repeatable; default: all).")
    ] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            help="Delete replaced files this long after replacement (0: at once, if no query runs)."
        ),
    ] = CompactConfig.grace_seconds,
    min_part_files: Annotated[
        int, typer.Option(help="Rewrite a partition once it has at least this many part files.")
    ] = CompactConfig.min_part_files,
    memory_limit: Annotated[
        str, typer.Option(help="DuckDB memory limit while merging.")
    ] = CompactConfig.memory_limit,
) -> None:
    """Merge small files per partition into one, drop superseded rows, delete replaced files after a grace period."""
    config = CompactConfig(
        grace_seconds=grace_seconds, min_part_files=min_part_files, memory_limit=memory_limit
    )
    console = Console(stderr=True)
    try:
        with console.status("compacting…") as status:
            results = compact(
                resolve_lake(lake),
                table or None,
                config=config,
                on_partition=lambda t, p: status.update(f"compacting `{t}` {p}"),
            )
    except StoreError as exc:
        raise fail(str(exc)) from None
    except KeyError as exc:
        raise fail(str(exc.args[0]) if exc.args else str(exc), 2) from None
    print_rows(
        ["table", "partitions", "files_in", "files_out", "rows_in", "rows_out", "deleted", "temps_removed"],
        [
            (
                r.table,
                r.partitions,
                r.files_in,
                r.files_out,
                r.rows_in,
                r.rows_out,
                r.deleted,
                r.temps_removed,
            )
            for r in results
        ],
        "table",
    )


app = typer.Typer(add_completion=False)  # its commands join `trajlake` on first use (flows.cli)
app.command("sql")(sql)
app.command("tables")(tables)
app.command("compact")(compact_cmd)
