"""What a run says while it works: each pipeline step as it starts and ends, and the trainers' loss.

Two audiences, one set of log records:

- **the console** of `trajlake pipeline`, `trajlake demo` and the training commands:
  `console_progress()` puts a rich handler on trajlake's loggers (`flows`, `training`) at
  INFO, on stderr, so a 30-minute night is never silent;
- **the Prefect API** (the UI's run logs): the flows log their steps with `get_run_logger()`,
  and `trajlake serve`/`pipeline` name the `training` logger in `PREFECT_LOGGING_EXTRA_LOGGERS`
  (Prefect's documented way to ship a library's records to the run's log), so the `train-sft`
  and `train-grpo` task runs show their loss. Flows do not use `log_prints`: it turns every
  `print` of every library inside a task into a log record, and `dill` (through `datasets`'
  fingerprinting of the trainers' `map` functions) prints a disassembly of each hashed
  function into a captured stdout that `log_prints` never lets it capture: the bytecode
  lines (`LOAD_GLOBAL 0 (pa)`) went to the run's log instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

LOGGER = logging.getLogger("flows.progress")
#: trajlake's loggers a console or a run's log shows at INFO
LOGGERS = ("flows", "training")


def step_started(name: str) -> None:
    """A pipeline step begins."""
    LOGGER.info("%s ...", name)


def step_finished(name: str, seconds: float) -> None:
    """A pipeline step ended after `seconds`."""
    LOGGER.info("%s: done in %.1f s", name, seconds)


def warning(text: str) -> None:
    """Something the run went on without, which its user should know (scenarios it could not replay)."""
    LOGGER.warning("%s", text)


def decision(text: str) -> None:
    """What the run decided (the gate's decision, or why nothing was trained)."""
    LOGGER.info("%s", text)


def log_at_info() -> None:
    """trajlake's loggers pass INFO records (Python's default is WARNING), to whatever handlers
    they have: the console's (`console_progress`) and, in a Prefect run, the API's."""
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)


@contextmanager
def console_progress() -> Iterator[None]:
    """Show trajlake's progress records on stderr while the block runs (a command's body): rich's
    handler, with the time and no logger path; records do not also reach the root logger's
    handlers meanwhile. Afterwards the loggers are as they were, so a command run in-process (a
    test's `CliRunner`, a notebook) leaves no handler behind and later records reach the root
    logger again (they did not: the trainers' warnings then missed pytest's caplog)."""
    from rich.console import Console
    from rich.logging import RichHandler

    before = [(logging.getLogger(name), logging.getLogger(name).level) for name in LOGGERS]
    log_at_info()
    added: list[tuple[logging.Logger, logging.Handler, bool]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if any(isinstance(h, RichHandler) for h in logger.handlers):
            continue  # an enclosing block shows them already
        handler = RichHandler(
            console=Console(stderr=True),
            show_path=False,
            show_level=False,
            markup=False,
            log_time_format="%X",
        )
        handler.setLevel(logging.INFO)
        added.append((logger, handler, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, ours, propagate in added:
            logger.removeHandler(ours)
            logger.propagate = propagate
        for logger, level in before:
            logger.setLevel(level)
