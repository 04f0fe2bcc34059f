"""The `trajlake` command line: one Typer app; each stage registers its commands from its own module.

Commands are thin: they turn options into config objects, open the lake, call one
library function, and print where the results went. Heavy imports (torch, prefect)
happen inside the commands so `trajlake sql` starts fast.
"""

from __future__ import annotations

import typer

from flows.commands import (
    collect_cmds,
    langfuse_cmds,
    pipeline_cmds,
    replay_cmds,
    score_cmds,
    store_cmds,
    train_cmds,
)

app = typer.Typer(
    name="trajlake",
    help="Production agent traces -> Parquet trajectory lake -> replay, scoring, SFT/GRPO LoRA adapters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (store_cmds, collect_cmds, langfuse_cmds, replay_cmds, score_cmds, train_cmds, pipeline_cmds):
    module.register(app)


def main() -> None:
    """Console entry point; a `trajlake.toml` in effect supplies `trajlake collect`'s defaults."""
    from flows.config import ConfigError, collect_defaults, config_file_present, load_config

    default_map = {}
    if config_file_present():
        try:
            default_map["collect"] = collect_defaults(load_config())
        except ConfigError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise SystemExit(2) from None
    app(default_map=default_map)


if __name__ == "__main__":
    main()
