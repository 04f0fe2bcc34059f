"""Training commands: `trajlake train sft`, `trajlake train grpo`, `trajlake publish`.

Each command turns its options into a trajlake config (TRL's `SFTConfig`/`GRPOConfig`
plus trajlake's fields), calls one library function and prints where the results went.
Every TRL/transformers setting without a dedicated flag is reachable through
`--set name=value` (repeatable), checked against the config's fields, so flags never
drift from the configs.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands.options import LakeOption, fail, resolve_lake

train_app = typer.Typer(
    help="Train LoRA adapters on the lake: SFT on conversations, GRPO on scored groups.", no_args_is_help=True
)

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="Any other config field as name=value (JSON values), e.g. --set warmup_steps=10."
    ),
]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue from the newest checkpoint in the output folder.")
]


BaseModelOption = Annotated[
    str, typer.Option("--base-model", help="Base model folder or hub id (available offline).")
]
OutputOption = Annotated[
    Path, typer.Option("--output", "-o", help="Run folder: checkpoints/ and adapter/ go here.")
]
MaxStepsOption = Annotated[int | None, typer.Option(help="Optimizer steps (overrides --epochs).")]
LearningRateOption = Annotated[float | None, typer.Option("--lr", help="Peak learning rate.")]
SaveStepsOption = Annotated[int | None, typer.Option(help="Checkpoint every N steps.")]
SeedOption = Annotated[int | None, typer.Option(help="Random seed.")]
ReportToOption = Annotated[str | None, typer.Option(help="Also report to wandb or tensorboard.")]


def parse_overrides(pairs: list[str] | None, config_cls: type) -> dict[str, Any]:
    """`name=value` pairs as config kwargs; unknown names fail listing close matches."""
    import difflib

    known = {f.name for f in fields(config_cls)}
    out: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise fail(f"`--set {pair}` must look like name=value")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise fail(
                f"`{name}` is not a field of {config_cls.__name__}"
                + (f"; did you mean {', '.join(close)}?" if close else "")
            )
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw  # plain strings need no quotes
    return out


def build_config(config_cls: type, output: Path, values: dict[str, Any], overrides: list[str] | None) -> Any:
    """The config from dedicated flags (None = TRL's default) and `--set` overrides."""
    from training.errors import TrainingError

    kwargs = {k: v for k, v in values.items() if v is not None}
    kwargs.update(parse_overrides(overrides, config_cls))
    try:
        return config_cls(output_dir=str(output / "checkpoints"), **kwargs)
    except (TrainingError, ValueError) as exc:
        raise fail(str(exc)) from None


def print_result(result: Any) -> None:
    typer.echo(f"{result.stage}: run `{result.run_id}`, {result.global_step} steps")
    for key, value in result.report.items():
        if value is not None:
            typer.echo(f"  {key}: {value}")
    typer.echo(f"adapter: {result.adapter_dir}")
    typer.echo(f"publish it: trajlake publish {result.adapter_dir} --name NAME")


@train_app.command("sft")
def train_sft_command(
    base_model: BaseModelOption,
    output: OutputOption,
    sql: Annotated[
        str,
        typer.Option(help="SQL returning the `trajectory_id`s to learn from (their conversations + tools)."),
    ] = "SELECT trajectory_id FROM trajectories",
    max_steps: MaxStepsOption = None,
    epochs: Annotated[float | None, typer.Option(help="Passes over the data.")] = None,
    learning_rate: LearningRateOption = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per device per step.")] = None,
    max_length: Annotated[int | None, typer.Option(help="Longest packed row in tokens.")] = None,
    packing: Annotated[
        bool, typer.Option("--packing/--no-packing", help="Pack conversations into full rows.")
    ] = True,
    lora_r: Annotated[int | None, typer.Option(help="LoRA rank (a vLLM rank: 8, 16, 32, 64, ...).")] = None,
    lora_alpha: Annotated[int | None, typer.Option(help="LoRA alpha.")] = None,
    save_steps: SaveStepsOption = None,
    seed: SeedOption = None,
    report_to: ReportToOption = None,
    resume: ResumeOption = False,
    overrides: SetOption = None,
    lake: LakeOption = None,
) -> None:
    """Fine-tune a LoRA adapter on selected conversations (assistant tokens only)."""
    from training.errors import TrainingError
    from training.sft import train_sft
    from training.sft_config import TrajlakeSFTConfig

    values = dict(
        max_steps=max_steps,
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        max_length=max_length,
        packing=packing,
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        save_steps=save_steps,
        seed=seed,
        report_to=report_to,
    )
    config = build_config(TrajlakeSFTConfig, output, values, overrides)
    try:
        result = train_sft(resolve_lake(lake), sql, base_model, output, config, resume=resume)
    except TrainingError as exc:
        raise fail(str(exc)) from None
    print_result(result)


@train_app.command("grpo")
def train_grpo_command(
    base_model: BaseModelOption,
    output: OutputOption,
    sql: Annotated[
        str,
        typer.Option(
            help="SQL returning the `trajectory_id`s of scored groups with token data (and optionally `reward`)."
        ),
    ] = "SELECT trajectory_id FROM trajectories WHERE source = 'replay' AND len(turns) > 0",
    adapter: Annotated[
        str | None,
        typer.Option(help="Adapter to continue from: a folder, or a registry ref name[:version|:alias]."),
    ] = None,
    reward: Annotated[str | None, typer.Option(help="Reward name (rewards.name) to train on.")] = None,
    loss_type: Annotated[
        str | None, typer.Option(help="dapo (default), grpo, dr_grpo, bnpo, cispo, sapo, ...")
    ] = None,
    beta: Annotated[
        float | None, typer.Option(help="KL weight towards the starting policy (0 = off).")
    ] = None,
    epsilon: Annotated[float | None, typer.Option(help="Clipping range of the importance ratio.")] = None,
    scale_rewards: Annotated[str | None, typer.Option(help="group, batch or none.")] = None,
    temperature: Annotated[
        float | None, typer.Option(help="The temperature the groups were sampled at.")
    ] = None,
    max_steps: MaxStepsOption = None,
    epochs: Annotated[float | None, typer.Option(help="Passes over the stored groups.")] = None,
    learning_rate: LearningRateOption = None,
    batch_size: Annotated[int | None, typer.Option(help="Trajectories per device per step.")] = None,
    lora_r: Annotated[int | None, typer.Option(help="LoRA rank for a fresh adapter.")] = None,
    save_steps: SaveStepsOption = None,
    seed: SeedOption = None,
    report_to: ReportToOption = None,
    resume: ResumeOption = False,
    overrides: SetOption = None,
    lake: LakeOption = None,
) -> None:
    """Train (or continue) a LoRA adapter with GRPO on stored, scored groups."""
    from training.errors import TrainingError
    from training.grpo import train_grpo
    from training.grpo_config import TrajlakeGRPOConfig
    from training.publish import resolve_adapter

    the_lake = resolve_lake(lake)
    values = dict(
        reward_name=reward,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        scale_rewards=scale_rewards,
        temperature=temperature,
        max_steps=max_steps,
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        lora_r=lora_r,
        save_steps=save_steps,
        seed=seed,
        report_to=report_to,
    )
    config = build_config(TrajlakeGRPOConfig, output, values, overrides)
    try:
        if adapter is not None and not Path(adapter).exists():
            adapter = resolve_adapter(the_lake, adapter)["path"]
        result = train_grpo(the_lake, sql, base_model, adapter, output, config, resume=resume)
    except TrainingError as exc:
        raise fail(str(exc)) from None
    print_result(result)


def publish_command(
    adapter_dir: Annotated[Path, typer.Argument(help="Adapter folder of a training run (…/adapter).")],
    name: Annotated[str, typer.Option("--name", help="Adapter name in the registry.")],
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Aliases to move to this version (default: latest).")
    ] = None,
    production: Annotated[
        bool,
        typer.Option(
            "--production", help="Also move `production` (runs the gate when --eval-reward is set)."
        ),
    ] = False,
    registry: Annotated[
        str | None, typer.Option(help="Registry path or URL (default: <lake>/_registry).")
    ] = None,
    base_model: Annotated[
        str | None, typer.Option("--base-model", help="Base model (default: from the run record).")
    ] = None,
    eval_reward: Annotated[
        str | None,
        typer.Option(help="Reward for the gate: a built-in reward name or package.module:function."),
    ] = None,
    eval_scenarios: Annotated[
        str, typer.Option(help="SQL returning the `scenario_id`s to evaluate on.")
    ] = "SELECT scenario_id FROM scenarios WHERE split = 'val'",
    eval_group_size: Annotated[int, typer.Option(help="Samples per val scenario.")] = 4,
    eval_max_tokens: Annotated[
        int, typer.Option(help="Most sampled tokens per model call when evaluating.")
    ] = 256,
    eval_backend: Annotated[
        str, typer.Option(help="Sampler backend for evaluation: transformers, vllm-server, vllm.")
    ] = "transformers",
    force: Annotated[
        bool, typer.Option("--force", help="Promote even if the gate finds it no better.")
    ] = False,
    max_lora_rank: Annotated[int, typer.Option(help="The serving vLLM's --max-lora-rank.")] = 16,
    load_into: Annotated[
        str | None, typer.Option("--load-into", help="Base URL of a running vLLM server to hot-load into.")
    ] = None,
    push_to_hub: Annotated[
        str | None, typer.Option("--push-to-hub", help="Hub repo owner/name (token from HF_TOKEN).")
    ] = None,
    lake: LakeOption = None,
) -> None:
    """Publish an adapter version to the registry (checks vLLM compatibility; optional eval gate, hot-load, hub)."""
    from training.errors import TrainingError
    from training.publish import publish

    the_lake = resolve_lake(lake)
    aliases = list(alias or ["latest"]) + (["production"] if production else [])
    evaluator = None
    if eval_reward:
        from judging.errors import JudgingError
        from judging.registry import get_reward
        from training.evaluation import replay_evaluator
        from training.replay.stage import ReplayConfig
        from training.run import read_run_record

        try:
            reward_fn = get_reward(eval_reward)
        except JudgingError as exc:
            raise fail(str(exc)) from None
        model = base_model or (read_run_record(adapter_dir) or {}).get("base_model")
        if not model:
            raise fail("the gate needs the base model; pass --base-model")
        evaluator = replay_evaluator(
            the_lake,
            model,
            reward_fn,
            scenarios=eval_scenarios,
            backend=eval_backend,
            replay_config=ReplayConfig(
                group_size=eval_group_size, max_tokens=eval_max_tokens, run="eval", seed=0
            ),
        )
    try:
        published = publish(
            the_lake,
            adapter_dir,
            name,
            aliases=aliases,
            registry=registry,
            base_model=base_model,
            evaluator=evaluator,
            force=force,
            max_lora_rank=max_lora_rank,
            load_into=load_into,
            push_to_hub=push_to_hub,
            hub_token=os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"),
        )
    except TrainingError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"published {published.ref} -> {published.path}")
    typer.echo(f"  aliases: {', '.join(published.aliases) or 'none'}")
    if published.gate:
        g = published.gate
        typer.echo(
            f"  gate: candidate {g.candidate:.4f} vs {g.incumbent_name} {g.incumbent:.4f}"
            + (" (forced)" if g.forced else "")
        )
    if published.loaded_into:
        typer.echo(f"  loaded into vLLM as `{published.loaded_into}`")
    if published.pushed_to:
        typer.echo(f"  pushed to {published.pushed_to}")


def register(app: typer.Typer) -> None:
    """Add `train sft`, `train grpo` and `publish` to the `trajlake` app."""
    app.add_typer(train_app, name="train")
    app.command("publish")(publish_command)
