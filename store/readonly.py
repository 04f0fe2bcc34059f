"""User SQL that only reads: the statement check, and running it with a time limit.

The check is the first of two walls and gives the clear error: each statement's type
comes from DuckDB's parser, and what an `EXPLAIN` explains must itself only read. It is
not what makes writing impossible, since DuckDB's grammar keeps finding new places for a
statement (`WITH a AS (COPY ... TO 'f') SELECT 1` parses as a SELECT). The second wall
is the connection itself: `store.catalog.connection.connect` gives DuckDB no file to open at all, and
`trajlake sql`'s local-file mode runs on a thread the kernel forbids to write
(`store.user_sql`, `store.sandbox`).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import duckdb

from store.errors import QueryTimeout, ReadOnlyViolation

_READ_ONLY_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class Parser(Protocol):
    """What splits SQL into typed statements: a connection, or the `duckdb` module itself."""

    def extract_statements(self, query: str) -> list[duckdb.Statement]: ...


def sql_tokens(sql: str) -> list[tuple[int, int, duckdb.token_type]]:
    """DuckDB's tokens of `sql`: (start, end, kind), as offsets into the string (DuckDB's tokenizer
    counts bytes of UTF-8, so text past an `é` would be cut in the wrong places otherwise)."""
    starts = duckdb.tokenize(sql)
    offsets = [start for start, _ in starts] + [len(sql)]
    if not sql.isascii():  # the character offset of each byte offset that starts a character
        at, position = {}, 0
        for index, char in enumerate(sql):
            at[position] = index
            position += len(char.encode())
        offsets = [at[start] for start, _ in starts] + [len(sql)]
    return [(offsets[i], offsets[i + 1], kind) for i, (_, kind) in enumerate(starts)]


def explained_statement(query: str) -> str:
    """The statement an `EXPLAIN` statement explains, found with DuckDB's own tokenizer.

    Comments anywhere (`/* c */ EXPLAIN ANALYZE COPY ...`, a `-- c` line first) are tokens
    of their own and skipped; `ANALYZE`/`ANALYSE` and a parenthesised option list
    (`EXPLAIN (ANALYZE, FORMAT json) ...`) are stepped over. Empty when nothing follows.
    """
    tokens = [(start, end) for start, end, kind in sql_tokens(query) if kind != duckdb.token_type.comment]

    def word(i: int) -> str:
        return query[tokens[i][0] : tokens[i][1]].strip().upper() if i < len(tokens) else ""

    i = 1  # tokens[0] is EXPLAIN
    if word(i) in ("ANALYZE", "ANALYSE"):
        i += 1
    elif word(i) == "(":
        depth = 0
        while i < len(tokens):
            depth += word(i).count("(") - word(i).count(")")
            i += 1
            if depth <= 0:
                break
    return query[tokens[i][0] :] if i < len(tokens) else ""


def check_read_only(con: Parser, sql: str) -> None:
    """Raise `ReadOnlyViolation` unless every statement in `sql` only reads.

    Statement types come from DuckDB's parser, never from our reading of the text. An
    `EXPLAIN` must explain a read-only statement too: `EXPLAIN ANALYZE` runs what it
    explains (`EXPLAIN ANALYZE COPY ... TO 'file'` writes the file).
    """
    for statement in con.extract_statements(sql):
        try:
            kind = statement.type
        except ValueError:  # a type DuckDB's Python enum does not know (`UPDATE EXTENSIONS`: 29)
            raise ReadOnlyViolation(" ".join(statement.query.split()[:2]).upper(), statement.query) from None
        if kind not in _READ_ONLY_STATEMENTS:
            raise ReadOnlyViolation(kind.name, statement.query)
        if statement.type == duckdb.StatementType.EXPLAIN:
            inner = explained_statement(statement.query)
            if not inner.strip():
                raise ReadOnlyViolation("EXPLAIN", statement.query)
            check_read_only(con, inner)


def run_read_only(
    con: duckdb.DuckDBPyConnection, sql: str, *, timeout_s: float | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run user SQL that may only read; (columns, rows) of the last statement.

    Every statement is checked before any runs. Statements run through `execute`, whose
    errors carry DuckDB's `LINE n: ...` pointer to the offending position. Past `timeout_s`
    the query is interrupted and `QueryTimeout` raised.
    """
    check_read_only(con, sql)
    columns: list[str] = []
    rows: list[tuple[Any, ...]] = []
    timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        for statement in con.extract_statements(sql):
            cursor = con.execute(statement.query)
            rows = cursor.fetchall()
            columns = [d[0] for d in cursor.description or []]
    except duckdb.InterruptException:
        raise QueryTimeout(
            f"the query ran past its limit of {timeout_s:g} s (`lake.sql_timeout_s`)"
        ) from None
    finally:
        if timer is not None:
            # Joined, not only cancelled: a thread still winding down while the interpreter
            # exits (a CLI error path) aborted the process in DuckDB's C++ unwinding.
            timer.cancel()
            timer.join()
    return columns, rows
