"""One module per stage, each exposing a typer `app`; shared options live in `lake.py` (`--lake`)
and `options.py` (those derived from the settings), the error exit in `exits.py`.

A command's module is imported when that command runs or shows its own help (`LazyGroup`):
the modules import what their commands use, and `trajlake sql` should not pay for the
trainers' libraries. Listing the commands (`trajlake --help`) loads none of them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


def command_app(**options: Any) -> typer.Typer:
    """A typer app of trajlake's commands: no shell-completion commands, and click's plain help,
    which reads well at 80 columns (rich's option table cuts long option names short there and
    lists `--help` with a type)."""
    return typer.Typer(add_completion=False, rich_markup_mode=None, **options)


class LazyGroup(TyperGroup):
    """A command group whose commands are imported only when used: `trajlake sql` does not
    pay for TRL's import, `trajlake train sft --help` does (its options are TRL's fields).

    `summaries` holds each lazy command's summary, the first sentence of its help, and
    `unlisted` the hidden ones, so the group's own help lists the commands without importing
    their modules (a command in neither is loaded to list it; tests/flows/test_startup.py
    holds both to the commands themselves).
    """

    lazy: dict[str, str] = {}  # command name -> "module:app", the Typer app that registers it
    summaries: dict[str, str] = {}  # command name -> its help's first sentence
    unlisted: frozenset[str] = frozenset()  # the lazy commands that are hidden

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: Any, name: str) -> Any:
        if name not in self.lazy:
            return super().get_command(ctx, name)
        module, _, attribute = self.lazy[name].partition(":")
        command = typer.main.get_command(getattr(importlib.import_module(module), attribute))
        return reflow_help(command.get_command(ctx, name) if isinstance(command, TyperGroup) else command)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands, each with the start of its summary (click's listing, without the imports)."""
        listed = []
        for name in self.list_commands(ctx):
            if name in self.unlisted:
                continue
            if name in self.summaries:
                listed.append((name, TyperCommand(name, help=self.summaries[name])))
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                listed.append((name, command))
        if listed:
            limit = formatter.width - 6 - max(len(name) for name, _ in listed)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in listed])


def reflow(text: str | None) -> str | None:
    r"""`text` with the line breaks inside its paragraphs taken out: the terminal wraps help to its
    own width, and a docstring's source line breaks would otherwise cut sentences in two.

    >>> reflow("Serve a model.\n\nA published adapter answers as\n`<name>-v<version>`.")
    'Serve a model.\n\nA published adapter answers as `<name>-v<version>`.'
    """
    if not text:
        return text
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def reflow_help(command: Any) -> Any:
    """A command (and a group's subcommands, and their options) with reflowed help."""
    command.help = reflow(command.help)
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            param.help = reflow(param.help)
    for sub in getattr(command, "commands", {}).values():
        reflow_help(sub)
    return command
