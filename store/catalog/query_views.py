"""Which of the lake's views a user's query reads, so that `trajlake sql` binds only those.

Binding a view costs its table's Delta log and a DuckDB `CREATE VIEW` (with its Parquet
footers): ~60 ms for all fourteen on 2 cores, more than the rest of `trajlake sql "select 1"`
past its imports. A query reads the views it names, and the views those read
(`messages` reads `trajectories`); one that looks at the catalog (`SHOW TABLES`,
`information_schema`, `duckdb_views()`, a table macro, `query_table('...')`) may see any
view, and gets them all. Names come from DuckDB's own tokenizer, so a view's name in a
comment or a string is not a reference, and a quoted or differently cased one is. The rule
errs one way only: a word it does not know makes it bind more, never less.
"""

from __future__ import annotations

import functools

import duckdb

from store.catalog.derived_views import DERIVED_VIEWS
from store.readonly import sql_tokens
from store.schema import TABLES

EVERY_VIEW = frozenset({*TABLES, *DERIVED_VIEWS})  # every view a connection has

# Words that read the catalog rather than a named view (DuckDB's catalog functions and views,
# its Postgres and SQLite compatibility names, statements that list or describe relations, and
# the table functions and macros that take a relation's name as text).
CATALOG_WORDS = frozenset(
    {"show", "describe", "summarize", "pragma", "information_schema", "query", "query_table", "group_stats"}
)
CATALOG_PREFIXES = ("duckdb_", "pg_", "sqlite_", "pragma_")

_WORDS = (duckdb.token_type.identifier, duckdb.token_type.keyword)


def _words(sql: str) -> list[str]:
    """The identifiers and keywords of `sql`, lower-cased, quoted ones unquoted."""
    words = []
    for start, end, kind in sql_tokens(sql):
        if kind not in _WORDS:
            continue
        word = sql[start:end].strip()
        if len(word) >= 2 and word[0] == word[-1] == '"':
            word = word[1:-1].replace('""', '"')
        words.append(word.lower())
    return words


@functools.cache
def _reads(view: str) -> frozenset[str]:
    """A derived view and every view it reads, transitively."""
    named = {word for word in _words(DERIVED_VIEWS[view]) if word in EVERY_VIEW and word != view}
    return frozenset({view}.union(*(_reads(name) if name in DERIVED_VIEWS else {name} for name in named)))


def views_read(sql: str) -> frozenset[str]:
    """The views `sql` may read: those it names and what they read, or every view when it
    looks at the catalog (DuckDB's tokenizer takes any text: what does not parse, DuckDB
    reports when it runs).

    >>> sorted(views_read("SELECT count(*) FROM messages WHERE role = 'tool'"))
    ['messages', 'trajectories']
    >>> views_read("SELECT 1 -- FROM trajectories")
    frozenset()
    >>> views_read("SHOW TABLES") == EVERY_VIEW
    True
    """
    words = _words(sql)
    if any(word in CATALOG_WORDS or word.startswith(CATALOG_PREFIXES) for word in words):
        return EVERY_VIEW
    named = {word for word in words if word in EVERY_VIEW}
    return frozenset().union(*(_reads(name) if name in DERIVED_VIEWS else {name} for name in named))
