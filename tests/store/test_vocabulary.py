"""The lake's vocabularies are declared once (`store.vocabulary`) and the writer holds rows to them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from store.errors import SchemaViolation
from store.lake import Lake
from store.rows import utc_now
from store.schema import table_spec
from store.selections import PRODUCTION_TRAJECTORIES
from store.vocabulary import PRODUCTION_SOURCES, SPAN_SOURCES, VOCABULARIES, TrajectorySource, equals, one_of
from store.writer import write

USER = {
    "role": "user",
    "content": "x",
    "name": None,
    "tool_call_id": None,
    "tool_calls": [],
    "is_error": None,
}


@pytest.mark.parametrize(
    ("table", "row", "column", "bad"),
    [
        ("trajectories", {"trajectory_id": "t", "started_at": utc_now()}, "source", "replays"),
        (
            "trajectories",
            {"trajectory_id": "t", "source": "otel", "started_at": utc_now()},
            "status",
            "fine",
        ),
        (
            "rewards",
            {"trajectory_id": "t", "name": "r", "scorer": "s", "scored_at": utc_now()},
            "status",
            "ko",
        ),
        (
            "scenarios",
            {"scenario_id": "s", "created_at": utc_now(), "messages": [USER]},
            "split",
            "test",
        ),
        ("runs", {"run_id": "r", "step": 1, "metrics": "{}", "at": utc_now()}, "stage", "dpo"),
    ],
)
def test_a_value_outside_the_vocabulary_is_refused_and_nothing_is_written(
    lake: Lake, table: str, row: dict, column: str, bad: str
) -> None:
    allowed = VOCABULARIES[table][column]
    good = {**row, column: allowed[0]}
    with pytest.raises(SchemaViolation) as info:
        write(lake, table, [good, {**row, column: bad}])
    assert info.value.column == column and info.value.row == 1 and bad in str(info.value)
    assert not (Path(lake.root) / table).exists()  # the good row was not written either
    write(lake, table, [good, *({**row, column: v} for v in allowed[1:])])  # every declared value
    if column not in table_spec(table).not_null:  # null where the column may be null
        write(lake, table, [{**row, "source": "otel"} if table == "trajectories" else row])


def test_production_sql_is_written_from_the_vocabulary() -> None:
    assert set(PRODUCTION_SOURCES) == set(get_args(TrajectorySource)) - {"replay"}
    assert PRODUCTION_TRAJECTORIES.endswith("WHERE source IN ('otel', 'langfuse', 'import')")


def test_sql_names_only_declared_values() -> None:
    assert equals("t.source", "replay", table="trajectories") == "t.source = 'replay'"
    assert equals("status", "resolved", table="ingest_errors") == "status = 'resolved'"
    with pytest.raises(ValueError, match=re.escape("`replayed` is not a value of `trajectories.source`")):
        equals("source", "replayed", table="trajectories")  # a typo fails where the SQL is written


def test_a_value_is_checked_against_its_own_tables_vocabulary() -> None:
    # `replay` is a trajectory source, never a span source; `resolved` an ingest error's status only
    with pytest.raises(
        ValueError,
        match=re.escape("`replay` is not a value of `spans.source`; its vocabulary: otel, langfuse"),
    ):
        equals("s.source", "replay", table="spans")
    with pytest.raises(ValueError, match=re.escape("`resolved` is not a value of `rewards.status`")):
        equals("status", "resolved", table="rewards")
    with pytest.raises(ValueError, match=re.escape("`scenarios.source` has no vocabulary")):
        equals("source", "replay", table="scenarios")


def test_one_of_checks_every_value() -> None:
    assert one_of("source", SPAN_SOURCES, table="spans") == "source IN ('otel', 'langfuse')"
    with pytest.raises(ValueError, match=re.escape("`import` is not a value of `spans.source`")):
        one_of("source", PRODUCTION_SOURCES, table="spans")


def test_no_code_spells_a_vocabulary_value_in_sql() -> None:
    import ast
    import re

    # `source = 'replay'` typed by hand in a library's SQL: it must come from `store.vocabulary.equals`/`one_of`.
    # Docstrings may show SQL; the demo's printed example queries are there for a person to read.
    pattern = re.compile(
        r"\b\"?(source|status|split|stage)\"?\s*(=|<>|!=|IN\s*\()\s*'[a-z_0-9]+'", re.IGNORECASE
    )
    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("ingest", "store", "judging", "training", "flows"):
        for path in sorted((root / package).rglob("*.py")):
            if "demo" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
            }
            found += [
                f"{path.relative_to(root)}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and pattern.search(node.value)
            ]
    assert not found, found
