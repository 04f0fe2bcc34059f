"""The console's progress handler belongs to the command that asked for it."""

from __future__ import annotations

import logging

from rich.logging import RichHandler

from flows.progress import console_progress


def test_the_console_handler_is_given_back_when_the_block_ends() -> None:
    """A command run in-process (`CliRunner`, a notebook) leaves trajlake's loggers as it found
    them: before, the rich handler stayed and `training` stopped propagating, so the trainers'
    warnings never reached the root logger's handlers (pytest's caplog among them) again."""
    training = logging.getLogger("training")
    handlers, propagate, level = list(training.handlers), training.propagate, training.level
    with console_progress(), console_progress():  # nested: shown once
        assert [type(h) for h in training.handlers].count(RichHandler) == 1
        assert not training.propagate and training.level == logging.INFO
    assert (training.handlers, training.propagate, training.level) == (handlers, propagate, level)
