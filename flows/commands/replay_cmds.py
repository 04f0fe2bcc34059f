"""Replay commands: `trajlake scenarios create|load`, `trajlake replay`, hidden `trajlake tiny-model`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import configured, in_effect_help, option_or_setting, quiet_libraries, setting
from flows.config.root import ServeSamplerSection
from flows.sampler_server import sampler_app
from store.errors import LegacyRows, address_rules
from store.selections import TRAIN_SCENARIOS
from training.chat.templates import ChatTemplateError
from training.errors import AdapterNotFound, AdapterNotServable
from training.models.known import KNOWN_MODELS
from training.replay.errors import ReplayError, ScenarioError
from training.replay.rollout.tools import ToolsConfig
from training.replay.samplers import SamplerConfig
from training.replay.scenario_io import create_scenarios, load_scenarios
from training.replay.scenarios import ScenarioConfig
from training.replay.stage import ReplayConfig
from training.replay.stage import replay as run_replay
from training.tiny import build_tiny_model

scenarios_app = command_app(
    help="Make replayable scenarios from trajectories, or load them from JSONL.", no_args_is_help=True
)


def scenarios_create(
    scenarios: ScenarioConfig,
    sql: Annotated[
        str | None,
        typer.Option(
            "--sql",
            help=in_effect_help(
                "select.scenarios",
                "SQL returning `trajectory_id`s (default: `[select] scenarios` of trajlake.toml or "
                "$TRAJLAKE_SELECT__SCENARIOS, else every production trajectory).",
            ),
            show_default=False,
        ),
    ] = None,
    lake: LakeOption = None,
) -> None:
    """Cut scenarios (prompt prefix, tools, expected outcome, recorded tool results) from selected trajectories."""
    sql = sql or setting("select.scenarios")

    try:
        result = create_scenarios(resolve_lake(lake, must_exist=True), sql, scenarios)
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"wrote {len(result.scenario_ids)} scenarios ({_splits(result.splits)})")
    for trajectory_id, reason in result.skipped:
        typer.echo(f"skipped {trajectory_id}: {reason}")


def scenarios_load(
    scenarios: ScenarioConfig,
    path: Annotated[
        Path, typer.Argument(help="JSONL file: one {messages, tools?, expected?, split?, ...} per line.")
    ],
    lake: LakeOption = None,
) -> None:
    """Load scenarios from a JSONL file (all lines are checked before anything is written)."""
    try:
        result = load_scenarios(resolve_lake(lake), path, scenarios)
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"wrote {len(result.scenario_ids)} scenarios ({_splits(result.splits)})")


def _splits(splits: dict[str, int]) -> str:
    return ", ".join(f"{n} {split}" for split, n in sorted(splits.items())) or "none"


def replay_command(
    replay: ReplayConfig,
    sampler: SamplerConfig,
    tools: ToolsConfig,
    scenarios: Annotated[
        str | None,
        typer.Option(
            "--scenarios",
            help=in_effect_help(
                "select.replay",
                "SQL returning `scenario_id`s (default: `[select] replay` of trajlake.toml or "
                f"$TRAJLAKE_SELECT__REPLAY, else the train scenarios: {TRAIN_SCENARIOS}).",
            ),
            show_default=False,
        ),
    ] = None,
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter folder to sample through.")] = None,
    rollout: Annotated[
        str | None,
        typer.Option(help="User rollout function `package.module:rollout` instead of the built-in loop."),
    ] = None,
    lake: LakeOption = None,
) -> None:
    """Group sampling: G token-exact trajectories per scenario (resumable: complete groups are skipped)."""
    scenarios = scenarios or setting("select.replay")
    the_lake = resolve_lake(lake, must_exist=True)  # before a model is loaded
    quiet_libraries()
    try:
        sampler_config = sampler
        if not sampler_config.model:
            raise fail(
                "--model is required: a model folder (transformers, vllm) or the served model's name", 2
            )
        if sampler_config.backend != "vllm-server":  # there it is the served name, not a path here
            check_model_folder(sampler_config.model)
        with sampler_config.build(adapter) as model:
            result = run_replay(
                the_lake,
                scenarios,
                model,
                replay,
                tools=tools.build(),
                rollout=rollout,
            )
    except LegacyRows as exc:  # an older lake: `trajlake migrate` first
        raise fail(str(exc), 2) from None
    except (ReplayError, ChatTemplateError) as exc:
        raise fail(str(exc)) from None
    typer.echo(
        f"wrote {len(result.group_ids)} groups ({len(result.trajectory_ids)} trajectories, "
        f"{result.generated_tokens} tokens, {result.tokens_per_s:.0f} tokens/s); "
        f"skipped {len(result.skipped_group_ids)} complete groups"
    )
    for scenario_id, error in result.failed:
        typer.secho(f"failed {scenario_id}: {error} (re-run to retry)", fg=typer.colors.YELLOW, err=True)
    if result.failed:
        raise typer.Exit(1)


def serve_sampler(
    defaults: ServeSamplerSection,
    model: Annotated[
        str | None,
        typer.Option(
            help=in_effect_help(
                "sampler.model",
                "Model folder to serve with the transformers backend (default: `[sampler] model` of "
                "trajlake.toml or $TRAJLAKE_SAMPLER__MODEL).",
            ),
            show_default=False,
        ),
    ] = None,
    adapter: Annotated[
        str | None,
        typer.Option(
            help="LoRA adapter: a folder, or a published version `name:alias|version` (with --lake)."
        ),
    ] = None,
    served_name: Annotated[
        str | None,
        typer.Option(
            help="Model name the adapter answers to (default: `<name>-v<version>` of a published one)."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    lake: LakeOption = None,
) -> None:
    """Serve a model over an OpenAI/vLLM-compatible API (token-id prompts, n, logprobs) on CPU or GPU.

    For machines without vLLM: `trajlake replay --backend vllm-server --base-url http://HOST:PORT`
    then works against it, and so do OpenAI SDK agents. A published adapter answers as
    `<name>-v<version>`, so production traces of agents using it are attributed to that
    version (`policy_performance`). The sampling options are the defaults of requests that set none;
    the model's precision is `[sampler] dtype`.
    A request past a limit (`n`, `max_tokens`, prompt or body size) is answered 400, one naming a
    model this server does not serve 404; SIGTERM stops it within seconds, requests in flight or not.
    """
    import uvicorn

    from ingest.otlp.server import guarded_protocol

    for rule, holds, allowed in address_rules(host, port):
        if not holds:
            raise fail(f"--{rule} must be {allowed}, got {host if rule == 'host' else port!r}", 2)
    request_limits = defaults.limits
    model = option_or_setting(model, "sampler.model", "--model", "the model folder to serve")
    check_model_folder(model)
    quiet_libraries()
    try:
        app, sampler, name = sampler_app(
            model,
            adapter,
            lake=resolve_lake(lake) if adapter and not Path(adapter).exists() else None,
            served_name=served_name,
            defaults=defaults.sampling(),
            limits=request_limits,
            dtype=setting("sampler.dtype"),
        )
    except (FileNotFoundError, AdapterNotFound, AdapterNotServable) as exc:
        raise fail(str(exc), 2) from None
    except (OSError, ValueError) as exc:  # transformers' answer to a folder that is not a model
        raise fail(f"--model `{model}` cannot be loaded: {first_line(exc)}", 2) from None
    typer.echo(f"serving {sampler.policy} as `{name}` on http://{host}:{port}/v1")
    with sampler:
        # In-flight requests get SHUTDOWN_GRACE_S after SIGTERM, then are cancelled (their
        # sampling stops at the next token): without a bound uvicorn waits for them, and a long
        # generation kept the server up. A client slower than `read_timeout_s` with its
        # headers is answered 408 and closed (the body's deadline is `guarded`'s).
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            http=guarded_protocol(request_limits.read_timeout_s),
        )


def check_model_folder(model: str) -> None:
    """A clean exit 2 for a `--model` that names a path that is not there (else transformers
    answers a 115-line traceback about hub repository ids); a known name or a hub id passes."""
    looks_like_path = model.startswith((".", "/", "~")) or Path(model).exists() or model.count("/") > 1
    if model in KNOWN_MODELS or not looks_like_path:
        return
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise fail(f"--model `{model}` is not a folder (a model folder holds config.json)", 2)
    if not (folder / "config.json").is_file():
        raise fail(f"--model `{model}` is not a model folder: it holds no config.json", 2)


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (library errors run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def tiny_model(
    path: Annotated[Path, typer.Argument(help="Folder to build the tiny model and tokenizer into.")],
    seed: Annotated[int, typer.Option(help="Seed of the random weights and the tokenizer corpus.")] = 0,
) -> None:
    """Build the tiny Qwen2-style test model (offline, deterministic, a no-op if already built)."""
    typer.echo(str(build_tiny_model(path, seed=seed)))


SHUTDOWN_GRACE_S = 3

app = command_app()  # its commands join `trajlake` on first use (flows.cli)
scenarios_app.command("create")(configured(scenarios_create, scenarios="scenarios"))
scenarios_app.command("load")(configured(scenarios_load, scenarios="scenarios"))
app.add_typer(scenarios_app, name="scenarios")
app.command("replay")(configured(replay_command, replay="replay", sampler="sampler", tools="tools"))
app.command("serve-sampler")(configured(serve_sampler, defaults="serve_sampler"))
app.command("tiny-model", hidden=True)(tiny_model)
