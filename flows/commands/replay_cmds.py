"""Replay commands: `trajlake scenarios create|load`, `trajlake replay`, hidden `trajlake tiny-model`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.commands.options import LakeOption, fail, resolve_lake

scenarios_app = typer.Typer(
    help="Make replayable scenarios from trajectories, or load them from JSONL.", no_args_is_help=True
)


@scenarios_app.command("create")
def scenarios_create(
    sql: Annotated[
        str,
        typer.Option(
            "--sql",
            help="SQL returning `trajectory_id`s, e.g. SELECT trajectory_id FROM trajectories WHERE ...",
        ),
    ],
    turn: Annotated[int, typer.Option(help="Cut before this assistant turn (0 = the first).")] = 0,
    val_fraction: Annotated[
        float, typer.Option(help="Share of scenarios put in the `val` split (by hash).")
    ] = 0.1,
    lake: LakeOption = None,
) -> None:
    """Cut scenarios (prompt prefix, tools, expected outcome, recorded tool results) from selected trajectories."""
    from training.replay.errors import ScenarioError
    from training.replay.scenario_io import create_scenarios
    from training.replay.scenarios import ScenarioConfig

    try:
        result = create_scenarios(
            resolve_lake(lake), sql, ScenarioConfig(turn=turn, val_fraction=val_fraction)
        )
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"wrote {len(result.scenario_ids)} scenarios")
    for trajectory_id, reason in result.skipped:
        typer.echo(f"skipped {trajectory_id}: {reason}")


@scenarios_app.command("load")
def scenarios_load(
    path: Annotated[
        Path, typer.Argument(help="JSONL file: one {messages, tools?, expected?, split?, ...} per line.")
    ],
    val_fraction: Annotated[float, typer.Option(help="Share put in `val` when a line gives no split.")] = 0.1,
    lake: LakeOption = None,
) -> None:
    """Load scenarios from a JSONL file (all lines are checked before anything is written)."""
    from training.replay.errors import ScenarioError
    from training.replay.scenario_io import load_scenarios
    from training.replay.scenarios import ScenarioConfig

    try:
        result = load_scenarios(resolve_lake(lake), path, ScenarioConfig(val_fraction=val_fraction))
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"wrote {len(result.scenario_ids)} scenarios")


def replay_command(
    scenarios: Annotated[
        str,
        typer.Option(
            "--scenarios",
            help="SQL returning `scenario_id`s, e.g. SELECT scenario_id FROM scenarios WHERE split='train'",
        ),
    ],
    model: Annotated[
        str, typer.Option(help="Model folder (transformers, vllm) or served model name (vllm-server).")
    ],
    group_size: Annotated[int, typer.Option("--group-size", "-g", help="Trajectories per scenario.")] = 4,
    backend: Annotated[str, typer.Option(help="transformers, vllm-server or vllm.")] = "transformers",
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter folder to sample through.")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer folder (default: the model).")] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="vllm-server URL (default: $TRAJLAKE_VLLM_URL, then http://127.0.0.1:8000)."),
    ] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option("--tool", help="Tool function `[name=]package.module:function` (repeatable)."),
    ] = None,
    recorded_tools: Annotated[
        bool, typer.Option(help="Answer other tool calls with results recorded in the source trajectory.")
    ] = True,
    rollout: Annotated[
        str | None,
        typer.Option(help="User rollout function `package.module:rollout` instead of the built-in loop."),
    ] = None,
    run: Annotated[str, typer.Option(help="Replay run name (a new name samples new groups).")] = "default",
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass.")] = 1.0,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
    max_turns: Annotated[int, typer.Option(help="Most model calls per rollout.")] = 8,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per model call.")] = 256,
    max_total_tokens: Annotated[int, typer.Option(help="Context budget per rollout.")] = 4096,
    concurrency: Annotated[int, typer.Option(help="Scenarios sampled at once.")] = 8,
    lake: LakeOption = None,
) -> None:
    """Group sampling: G token-exact trajectories per scenario (resumable: complete groups are skipped)."""
    from training.replay.errors import ReplayError
    from training.replay.rollout.tools import make_tools
    from training.replay.samplers import make_sampler
    from training.replay.stage import ReplayConfig, replay

    options: dict[str, object] = {"adapter": adapter, "tokenizer": tokenizer}
    if backend == "vllm-server":
        options["base_url"] = base_url or os.environ.get("TRAJLAKE_VLLM_URL") or "http://127.0.0.1:8000"
        options["api_key"] = os.environ.get("TRAJLAKE_VLLM_API_KEY")
    try:
        config = ReplayConfig(
            group_size=group_size,
            run=run,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_total_tokens=max_total_tokens,
            concurrency=concurrency,
        )
        sampler = make_sampler(backend, model, **options)
        with sampler:
            result = replay(
                resolve_lake(lake),
                scenarios,
                sampler,
                config,
                tools=make_tools(tool or (), recorded=recorded_tools),
                rollout=rollout,
            )
    except ReplayError as exc:
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
    model: Annotated[str, typer.Option(help="Model folder to serve with the transformers backend.")],
    adapter: Annotated[str | None, typer.Option(help="Default LoRA adapter folder.")] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Serve a model over an OpenAI/vLLM-compatible API (token-id prompts, n, logprobs) on CPU or GPU.

    For machines without vLLM: `trajlake replay --backend vllm-server --base-url http://HOST:PORT`
    then works against it, and so do OpenAI SDK agents.
    """
    import uvicorn

    from training.replay.rollout.openai_app import create_app
    from training.replay.samplers import make_sampler

    sampler = make_sampler("transformers", model, adapter=adapter)
    typer.echo(f"serving {sampler.policy} on http://{host}:{port}/v1")
    uvicorn.run(create_app(sampler), host=host, port=port, log_level="warning")


def tiny_model(
    path: Annotated[Path, typer.Argument(help="Folder to build the tiny model and tokenizer into.")],
    seed: Annotated[int, typer.Option(help="Seed of the random weights and the tokenizer corpus.")] = 0,
) -> None:
    """Build the tiny Qwen2-style test model (offline, deterministic, a no-op if already built)."""
    from training.tiny import build_tiny_model

    typer.echo(str(build_tiny_model(path, seed=seed)))


def register(app: typer.Typer) -> None:
    """Add this stage's commands to the `trajlake` app."""
    app.add_typer(scenarios_app, name="scenarios")
    app.command("replay")(replay_command)
    app.command("serve-sampler")(serve_sampler)
    app.command("tiny-model", hidden=True)(tiny_model)
