"""The console's progress handler belongs to the command that asked for it."""

from __future__ import annotations

import logging

import click
from rich.logging import RichHandler

from flows.progress import show_on_console


def test_the_console_handler_is_given_back_when_the_command_ends() -> None:
    """A command run in-process (`CliRunner`, a notebook) leaves trajlake's loggers as it found
    them: before, the rich handler stayed and `training` stopped propagating, so the trainers'
    warnings never reached the root logger's handlers (pytest's caplog among them) again."""
    training = logging.getLogger("training")
    level = training.level
    with click.Context(click.Command("pipeline")):
        show_on_console()
        show_on_console()  # once, however often called
        assert [type(h) for h in training.handlers].count(RichHandler) == 1
        assert not training.propagate and training.level == logging.INFO
    assert not any(isinstance(h, RichHandler) for h in training.handlers)
    assert training.propagate and training.level == level
