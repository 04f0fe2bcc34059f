"""`trajlake pipeline`, `trajlake serve`, `trajlake demo`, `trajlake config`: running the whole loop."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption
from flows.commands.options import quiet_libraries
from flows.config.checks import check as check_settings
from flows.config.checks import load_config
from flows.config.errors import ConfigError
from flows.config.keys import describe
from flows.config.root import in_effect, load_settings
from flows.deployments import serve_deployments
from flows.progress import console_progress
from flows.stages.common import StageError, base_model, loadable_base_model
from ingest.assembly import BUILD
from store.errors import LegacyRows
from store.migrate import require_migrated
from store.pipeline_runs import pipeline_runs
from training.models.known import KNOWN_MODELS

ConfigOption = Annotated[
    str | None,
    typer.Option("--config", "-c", help="trajlake.toml (default: $TRAJLAKE_CONFIG, then ./trajlake.toml)."),
]


def _prefect_defaults(home: Path) -> None:
    """Offline-friendly Prefect settings, unless the user configured Prefect already.

    Runs log at INFO to the Prefect API (the UI's run logs), with the trainers' `training` logger
    shipped there too; the console shows Prefect's warnings only, and trajlake's own progress
    (`flows.progress`). Set before Prefect is imported: it reads its logging settings once.
    """
    if not os.environ.get("PREFECT_API_URL") and not os.environ.get("PREFECT_HOME"):
        home.mkdir(parents=True, exist_ok=True)
        os.environ["PREFECT_HOME"] = str(home)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    for key, value in PREFECT_LOGGING.items():
        os.environ.setdefault(key, value)


#: Prefect's logging settings for trajlake's runs (`_prefect_defaults`; the user's own win)
PREFECT_LOGGING = {
    "PREFECT_LOGGING_LEVEL": "INFO",  # WARNING here kept every run's log in the UI empty
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "training",
}


def _configure(config: str | None, lake: str | None) -> Any:
    """The checked configuration (exit 2 naming the bad key otherwise), with Prefect set up beside the lake.

    Everything configured here runs the pipeline (now or on a schedule), which trains on the
    base model: an unset `sampler.model` is refused here, before any work.
    """
    try:
        cfg = load_config(config).with_lake(lake)
        base_model(cfg.sampler)
    except (ConfigError, StageError) as exc:
        raise fail(str(exc), 2) from None
    _prefect_defaults(Path(cfg.lake.path).absolute().parent / ".prefect")
    return cfg


def pipeline(
    config: ConfigOption = None,
    lake: LakeOption = None,
    rounds: Annotated[
        int | None, typer.Option(help="Rounds of replay -> score -> GRPO (default: pipeline.rounds).")
    ] = None,
    force_publish: Annotated[
        bool, typer.Option(help="Promote the adapter even if it is not better.")
    ] = False,
) -> None:
    """Run the whole loop once as a Prefect flow."""
    cfg = _configure(config, lake)

    try:
        loadable_base_model(cfg.sampler)
        require_migrated(cfg.lake.path)  # before Prefect starts: an older lake, one line
    except (StageError, LegacyRows) as exc:
        raise fail(str(exc), 2) from None
    quiet_libraries()
    from flows.prefect_flows import run_pipeline

    try:
        with console_progress():  # each step as it starts and ends, and the trainers' loss
            result = run_pipeline(config, cfg.lake.path, rounds=rounds, force_publish=force_publish)
    except Exception:
        failed = _failed_run(cfg)
        if failed is None:
            raise
        raise fail(f"pipeline run {failed.run_id} failed at {failed.error}") from None
    run = result["run"]
    typer.echo(
        f"pipeline run {run.run_id}: started from {run.start_adapter or 'the base model'}, learned from "
        + (f"what is new since {run.since}" if run.since else "everything selected")
        + f"; {run.training_steps} training steps"
    )
    for row in result["rounds"]:
        failed = (
            f"; {row['failed_scenarios']} scenarios could not be replayed" if row["failed_scenarios"] else ""
        )
        typer.echo(
            f"round {row['round']}: policy {row['policy']} mean reward {row['mean_reward']:.3f}{failed}"
        )
    if result.get("published"):
        published = result["published"]
        aliases = f" ({', '.join(published['aliases'])})" if published["aliases"] else ""
        typer.echo(f"published {published['name']} v{published['version']}{aliases} -> {published['path']}")
    typer.echo(run.decision or "")


def _failed_run(cfg: Any) -> Any:
    """The newest pipeline run of the lake, when it is recorded as failed (its step and error)."""
    runs = pipeline_runs(cfg.lake.path, skip_unmigrated=True)
    return runs[-1] if runs and runs[-1].status == "failed" else None


def serve(
    config: ConfigOption = None,
    lake: LakeOption = None,
    once: Annotated[bool, typer.Option(help="Register the deployments, poll once, and exit.")] = False,
) -> None:
    """Register the ingest and pipeline deployments with their schedules and serve them.

    Deployment runs take SQL from whoever triggers them (their parameters, the config), so
    their SQL may read only the lake's tables (`lake.sql_lake_only`, forced on by the
    deployments' `sql_lake_only` parameter for every flow run they start).
    """
    cfg = _configure(config, lake)

    names = serve_deployments(cfg, config, run_once=once)
    typer.echo("served: " + ", ".join(names))


def demo(
    workdir: Annotated[Path, typer.Option(help="Where the demo's lake, model and report go.")] = Path(
        "trajlake-demo"
    ),
    size: Annotated[str, typer.Option(help="full (the real demo) or small (a quick smoke run).")] = "full",
    judge_base_url: Annotated[
        str, typer.Option(help="OpenAI-compatible judge endpoint for RULER (optional).")
    ] = "",
    judge_model: Annotated[str, typer.Option(help="Judge model name for RULER.")] = "",
    backend: Annotated[
        str,
        typer.Option(
            help="Sampler of replay, evaluation and serving: transformers, or vllm (a real vLLM server "
            "started by the demo; needs vLLM installed: `.ci/vllm-env`)."
        ),
    ] = "transformers",
    model: Annotated[
        str,
        typer.Option(
            help="Base model: tiny (built here, the default), smollm2-135m-instruct (fetched once, "
            "`trajlake model fetch`), or a model folder or hub id; a real model runs the real-model sizes."
        ),
    ] = "tiny",
) -> None:
    """The whole loop, offline, on a tiny local model (or `--model`): traces -> lake -> replay -> score ->
    SFT/GRPO -> evaluate every stage -> publish -> the adapter serves production (each step timed);
    every number printed is also written to `<workdir>/summary.json`."""
    from flows.demo.run import run_demo, sizes_for

    if not model:
        raise fail("--model is empty; name `tiny`, `smollm2-135m-instruct`, a model folder or a hub id", 2)
    sizes = sizes_for(model)
    if size not in sizes:
        raise fail(f"unknown --size `{size}`; choose from {', '.join(sizes)}", 2)
    if backend not in ("transformers", "vllm"):
        raise fail(f"unknown --backend `{backend}`; choose transformers or vllm", 2)
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise fail(
            "--backend vllm needs vLLM in this environment: run `.ci/vllm-env`, then "
            "`.venv-vllm/bin/trajlake demo --backend vllm` (README: vLLM)",
            2,
        )
    if model != "tiny" and "/" not in model and not Path(model).exists() and model not in KNOWN_MODELS:
        raise fail(
            f"unknown --model `{model}`: not a folder, a hub id (owner/name) or a known name "
            f"({', '.join(['tiny', *KNOWN_MODELS])})",
            2,
        )
    _prefect_defaults(workdir.absolute() / ".prefect")
    quiet_libraries()

    with console_progress():  # the pipeline's steps and the trainers' loss between the demo's own lines
        run_demo(
            workdir,
            size=size,
            judge_base_url=judge_base_url or None,
            judge_model=judge_model or None,
            backend=backend,
            model=model,
        )


def config_reference(
    config: ConfigOption = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Every key with its declared default, as the README's table.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Also build every table and resolve every reward, tool and selection it names, as a command would; exit 2 naming the first that fails.",
        ),
    ] = False,
) -> None:
    """Print every configuration key with the value in effect and where it came from (the environment,
    trajlake.toml or the default), and its meaning."""
    if markdown:
        typer.echo("| key | default | meaning |\n| --- | --- | --- |")
        for key in describe():
            typer.echo(f"| `{key.key}` | `{shown(key.default, key.type)}` | {key.help} |")
        return
    try:
        found = in_effect(config)
        if check:  # first: a bad configuration is one line, not the listing and then the line
            check_settings(load_settings(config), config)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None

    typer.echo(f"# the assembler runs: {BUILD}")
    for key in describe():
        value, source = found.get(key.key, (key.default, "default"))
        typer.echo(f"{key.key} = {shown(value, key.type)}    ({source})\n    {key.help}")
    if check:
        typer.echo(
            "# the configuration is valid: every table builds, and every reward, tool and selection it "
            "names resolves"
        )


def shown(value: Any, declared: Any) -> str:
    """A value as `trajlake config` prints it: as Python writes it, TRL's undescribed defaults as is."""
    return str(value) if declared is None and value == "(TRL's)" else repr(value)


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("pipeline")(pipeline)
app.command("serve")(serve)
app.command("demo")(demo)
app.command("config")(config_reference)
