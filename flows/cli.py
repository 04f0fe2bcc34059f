"""The `trajlake` command line: one Typer app whose commands live in `flows.commands`, one module per stage.

Commands are thin: they turn options into config objects, open the lake, call one
library function, and print where the results went. A command's module is imported
only when that command runs, so `trajlake sql` never pays for torch, TRL or Prefect;
options derived from the libraries' config declarations (`flows.settings`) are built
then too.
"""

from __future__ import annotations

import os

from flows.commands import command_app
from flows.commands.options import LazyGroup

COMMANDS = {
    "sql": "store_cmds",
    "tables": "store_cmds",
    "compact": "store_cmds",
    "migrate": "store_cmds",
    "collect": "collect_cmds",
    "assemble": "collect_cmds",
    "ingest": "langfuse_cmds",
    "scenarios": "replay_cmds",
    "replay": "replay_cmds",
    "serve-sampler": "replay_cmds",
    "tiny-model": "replay_cmds",
    "score": "score_cmds",
    "combine": "score_cmds",
    "agreement": "score_cmds",
    "train": "train_cmds",
    "publish": "train_cmds",
    "pipeline": "pipeline_cmds",
    "serve": "pipeline_cmds",
    "demo": "pipeline_cmds",
    "config": "pipeline_cmds",
    "report": "report_cmds",
    "evaluate": "evaluate_cmds",
    "model": "model_cmds",
    "forget": "forget_cmds",
    "labels": "labels_cmds",
    "retrain": "forget_cmds",
}


class TrajlakeGroup(LazyGroup):
    lazy = {name: f"flows.commands.{module}:app" for name, module in COMMANDS.items()}


app = command_app(
    name="trajlake",
    cls=TrajlakeGroup,
    help="Production agent traces -> trajectory lake -> replay, scoring, SFT/GRPO LoRA adapters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def trajlake() -> None:
    """Production agent traces -> trajectory lake -> replay, scoring, SFT/GRPO LoRA adapters."""


def main() -> None:
    """Console entry point (a `trajlake.toml` in effect and `TRAJLAKE_*` variables supply option defaults)."""
    cpu_defaults()
    app()


def cpu_defaults() -> None:
    """OpenMP threads wait passively unless the user chose otherwise (`OMP_WAIT_POLICY`).

    Set before torch loads (its OpenMP runtime reads the variable once). On a CPU shared with
    other work, threads that spin between parallel regions took the cores from the threads with
    work: a SmolLM2 decode step took 1,718 ms instead of 133 ms beside one busy process, and
    64 ms instead of 162 ms on a machine with light background load (README: Performance).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


if __name__ == "__main__":
    main()
