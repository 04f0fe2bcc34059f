"""Every command's --help shows its help texts as written: the terminal's markup (rich, through
typer) must not swallow a bracketed word such as `[replay]`, `[name=]` or `[default: 8]`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from flows.cli import app
from flows.config.keys import first_sentence

# A bracketed token of a help text: what rich would take for a markup tag, and drop.
BRACKETED = re.compile(r"\[[^\[\]\n]*\]")
# What the rendered help adds around the words: padding, line breaks and the panels' borders.
LAYOUT = re.compile(r"[\s│╭╮╰╯─]+")


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """`command` and every command below it, hidden ones and lazily loaded ones included (typer's
    own copy of click's classes: a group is what lists commands)."""
    yield path, command
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"`{' '.join((*path, name))}` is listed but cannot be loaded"
            yield from commands(sub, (*path, name))


def declared_texts(command: Any) -> list[str]:
    """The help texts as declared (rich's `\\[` escape undone: it is how a bracket is written)."""
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    return [t.replace("\\[", "[") for t in texts if t]


def flat(text: str) -> str:
    return LAYOUT.sub("", text)


ALL = sorted(commands(typer.main.get_command(app)), key=lambda pc: pc[0])


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in ALL}
    assert {"", "train grpo", "train sft", "replay", "score", "pipeline", "serve-sampler"} <= names


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) or "trajlake" for p, _ in ALL])
def test_every_bracketed_word_of_the_help_texts_is_shown(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    shown = flat(result.output)
    missing = [
        token
        for text in declared_texts(command)
        for token in BRACKETED.findall(text.split("\f")[0])  # typer shows a docstring up to \f
        if flat(token) not in shown
    ]
    assert not missing, f"`trajlake {' '.join(path)} --help` lost {missing}"


def test_help_prose_is_not_cut_where_its_source_lines_end() -> None:
    result = CliRunner().invoke(app, ["serve-sampler", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    # one paragraph, filled to the width: the docstring's own line breaks are gone
    assert "  published adapter answers as `<name>-v<version>`, so production traces of\n" in result.output
    assert (
        first_sentence("Judge model (e.g. `o3`, or a served one). More.")
        == "Judge model (e.g. `o3`, or a served one)."
    )


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) or "trajlake" for p, _ in ALL])
def test_help_reads_whole_at_80_columns(path: tuple[str, ...], command: Any) -> None:
    """Lines within 80 columns, no option name cut short, `--help` without a type beside it."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    # past 80 only an option's flags alone on their line (click does not break a flag)
    long = [line for line in result.output.splitlines() if len(line) > 80]
    assert all(re.fullmatch(r"  --[\w-]+( / --[\w-]+)?", line) for line in long), long
    flags = [
        o for p in command.params if not getattr(p, "hidden", False) for o in p.opts if o.startswith("-")
    ]
    assert all(re.search(rf"(^|[\s,/]){re.escape(flag)}([\s,/]|$)", result.output, re.M) for flag in flags)
    assert re.search(r"^  --help\s+Show this message and exit\.$", result.output, re.M)
