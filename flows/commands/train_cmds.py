"""Training commands: the `trajlake train` group (`sft`, `grpo`: see `flows.commands.trl_cmds`)
and `trajlake publish`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands import LazyGroup, command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import configured
from flows.config.checks import load_config
from flows.config.errors import ConfigError
from flows.stages import StageError
from judging.errors import RewardSpecError
from judging.registry import resolve_reward_key
from store.selections import VAL_SCENARIOS
from training.errors import PromotionRefused, TrainingError
from training.publish import PublishConfig
from training.publish import publish as publish_version
from training.run import read_run_record


class TrainGroup(LazyGroup):
    lazy = {"sft": "flows.commands.trl_cmds:app", "grpo": "flows.commands.trl_cmds:app"}
    summaries = {  # `trajlake train --help` lists them without importing TRL
        "sft": "Fine-tune a LoRA adapter on selected conversations (assistant tokens only).",
        "grpo": "Train (or continue) a LoRA adapter with GRPO on stored, scored groups.",
    }


train_app = command_app(
    cls=TrainGroup,
    help="Train LoRA adapters on the lake: SFT on conversations, GRPO on scored groups.",
    no_args_is_help=True,
)


def publish_command(
    publish: PublishConfig,
    adapter_dir: Annotated[Path, typer.Argument(help="Adapter folder of a training run (…/adapter).")],
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Aliases to move to this version (default: latest).")
    ] = None,
    production: Annotated[
        bool,
        typer.Option(
            "--production", help="Also move `production` (runs the gate when --eval-reward is set)."
        ),
    ] = False,
    base_model: Annotated[
        str | None, typer.Option("--base-model", help="Base model (default: from the run record).")
    ] = None,
    eval_reward: Annotated[
        str | None,
        typer.Option(
            help="Reward for the gate: a spec (a built-in, package.module:function, a registered name) "
            "or the name of a reward `[score] rewards` scores."
        ),
    ] = None,
    eval_scenarios: Annotated[
        str, typer.Option(help="SQL returning the `scenario_id`s to evaluate on.")
    ] = VAL_SCENARIOS,
    force: Annotated[
        bool, typer.Option("--force", help="Promote even if the gate finds it no better.")
    ] = False,
    lake: LakeOption = None,
) -> None:
    """Publish an adapter version to the registry (checks vLLM compatibility; optional eval gate, hot-load, hub).

    The gate replays the val scenarios with the candidate and the production adapter
    (or the base model) on the `sampler` and `replay` settings in effect, scores them
    with `--eval-reward`, and promotes only on a paired improvement; with `--production`, a
    refused candidate is not published at all (as a pipeline run's). Every gate decision is
    recorded in `runs` (stage `publish`) and listed in the report's pipeline runs.
    """
    from flows.stages.evaluate import record_publish_decision

    the_lake = resolve_lake(lake)
    config = publish
    aliases = list(alias or ["latest"]) + (["production"] if production else [])
    model = base_model or (read_run_record(adapter_dir) or {}).get("base_model")
    gate = _evaluate(the_lake.root, config.name, adapter_dir, model, eval_reward, eval_scenarios, force)
    try:
        published = publish_version(
            the_lake, adapter_dir, config, aliases=aliases, base_model=base_model, gate=gate
        )
    except PromotionRefused as exc:  # the gate refused: nothing published, the decision recorded
        if gate is not None:
            record_publish_decision(the_lake, str(adapter_dir), gate, None, config.name)
        raise fail(str(exc)) from None
    except TrainingError as exc:
        raise fail(str(exc)) from None
    if gate is not None:  # every gate decision is in `runs`, and the report's pipeline runs show it
        record_publish_decision(the_lake, str(adapter_dir), gate, published, config.name)
    typer.echo(f"published {published.ref} -> {published.path}")
    typer.echo(f"  aliases: {', '.join(published.aliases) or 'none'}")
    if published.gate:
        g = published.gate
        low, high = g.difference_ci
        typer.echo(
            f"  gate: candidate {g.candidate:.4f} vs {g.incumbent_name} {g.incumbent:.4f}, paired difference "
            f"{g.difference:+.4f} (95% CI {low:+.4f} to {high:+.4f})" + (" (forced)" if g.forced else "")
        )
    if published.loaded_into:
        typer.echo(f"  loaded into vLLM as `{published.loaded_into}` on {', '.join(published.loaded_on)}")
        if published.unloaded:
            typer.echo(f"  unloaded the versions it replaces: {', '.join(published.unloaded)}")
    if published.pushed_to:
        typer.echo(f"  pushed to {published.pushed_to}")


def _evaluate(
    lake: str,
    name: str,
    adapter_dir: Path,
    model: str | None,
    reward: str | None,
    scenarios: str,
    force: bool,
):  # type: ignore[no-untyped-def]
    """The gate for `publish --eval-reward`: the pipeline's evaluation, on the settings in effect."""
    if not reward:
        return None
    from flows.stages import ReplaySections, lake_of
    from flows.stages.evaluate import evaluate_adapter, gate_of

    if not model:
        raise fail("the gate needs the base model; pass --base-model", 2)
    try:
        configured = load_config()
        reward = resolve_reward_key(reward, configured.score.rewards)[0]  # a name: the spec that scores it
        config = (
            configured.with_lake(lake)
            .with_values("sampler", model=model)
            .with_values("score", rewards=[reward], reward=reward)
            .with_values("evaluate", reward=reward)
            .with_values("select", evaluate=scenarios)
            .with_values("publish", name=name)
        )
        evaluation = evaluate_adapter(
            lake_of(config.lake),
            str(adapter_dir),
            publish=config.publish,
            evaluate=config.evaluate,
            select=config.select,
            score=config.score,
            judge=config.judge,
            replaying=ReplaySections.of(config),
        )
        return gate_of(evaluation, forced=force)
    except (ConfigError, StageError, RewardSpecError) as exc:
        raise fail(str(exc), 2) from None


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.add_typer(train_app, name="train")
app.command("publish")(configured(publish_command, publish="publish"))
