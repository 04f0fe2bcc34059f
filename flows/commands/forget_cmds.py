"""`trajlake forget`: erase conversations and everything derived from them, and say what it did."""

from __future__ import annotations

import getpass
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.store_cmds import print_rows
from store.erasure.apply import pending_plans
from store.erasure.plan import ErasureSelection, plan_summary
from store.errors import SelectionError, StoreError
from training.errors import TrainingError
from training.retrain import retrain as run_stages


def forget(
    user_id: Annotated[
        str | None, typer.Option("--user-id", help="Erase every conversation of this user.")
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--session-id", help="Erase every conversation of this session.")
    ] = None,
    trace_id: Annotated[str | None, typer.Option("--trace-id", help="Erase this trace.")] = None,
    where: Annotated[
        str | None,
        typer.Option(
            "--where", help="Erase the trajectories matching this SQL condition (e.g. \"agent_name = 'x'\")."
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Erase (without it: a dry run listing what would go).")
    ] = False,
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks, for the audit row (default: the OS user).")
    ] = None,
    spool_wait_s: Annotated[
        float,
        typer.Option("--spool-wait-s", help="How long to wait for live collectors to flush erased rows."),
    ] = 30.0,
    lake: LakeOption = None,
) -> None:
    """Erase a user's, session's or trace's conversations (or a SQL selection) from every copy in the lake."""
    from flows.stages.forget import ErasureIncomplete, carry_out, derived_counts, finish_pending, plan

    chosen = {
        k: v
        for k, v in {
            "user_id": user_id,
            "session_id": session_id,
            "trace_id": trace_id,
            "where": where,
        }.items()
        if v is not None
    }
    if len(chosen) != 1:
        raise fail("give exactly one of --user-id, --session-id, --trace-id, --where", 2)
    if not math.isfinite(spool_wait_s) or spool_wait_s < 0:
        raise fail(f"--spool-wait-s must be a number of seconds >= 0, got {spool_wait_s}", 2)
    ((kind, value),) = chosen.items()
    the_lake = resolve_lake(lake, must_exist=True)
    console = Console(stderr=True)
    try:
        selection = ErasureSelection(kind, value)  # type: ignore[arg-type]
        if yes and pending_plans(the_lake):
            with console.status("finishing an interrupted erasure…") as status:
                for done in finish_pending(the_lake, spool_wait_s=spool_wait_s, on_step=status.update):
                    console.print(f"finished the interrupted erasure `{done.plan.erasure_id}`")
        erasure, adapters = plan(the_lake, selection, requested_by=by or getpass.getuser())
    except (SelectionError, ValueError) as exc:
        raise fail(str(exc), 2) from None
    except StoreError as exc:
        raise fail(str(exc)) from None
    summary = plan_summary(erasure)
    print_rows(
        ["table", "rows", "files_to_rewrite"],
        [(t, summary["rows"][t], summary["files"][t]) for t in summary["rows"]],
        "table",
    )
    if summary["matched"]:  # why: which identity attribute (or column) chose how many rows
        print_rows(
            ["matched_by", "rows", "traces"],
            [(place, m["rows"], m.get("traces", "")) for place, m in summary["matched"].items()],
            "table",
        )
    derived = derived_counts(the_lake, erasure)
    console.print(
        f"derived data: {derived['judge_cache_entries']} judge cache entries, {derived['spool_rows']} rows in "
        f"collectors' spools; adapters trained on these conversations: {', '.join(adapters) or 'none'}"
    )
    if erasure.empty and not derived["spool_rows"]:
        console.print("nothing in the lake matches; nothing to erase")
        return
    if not yes:
        console.print(f"dry run: {summary['bytes']} bytes of files to rewrite; rerun with --yes to erase")
        return
    try:
        with console.status("erasing…") as status:
            report = carry_out(
                the_lake, erasure, spool_wait_s=spool_wait_s, on_step=lambda s: status.update(f"erasing: {s}")
            )
    except ErasureIncomplete as exc:
        raise fail(str(exc)) from None
    console.print(
        f"erased and checked: {sum(t.rows_deleted for t in report.tables)} rows, {report.files_rewritten} files "
        f"rewritten ({report.bytes_written} bytes written), {report.spool_rows} spool rows, "
        f"{report.cache_entries} judge cache entries; adapters marked trained_on_erased_data: "
        f"{', '.join(report.adapters) or 'none'}; audit row `{erasure.erasure_id}` in `erasures`"
    )


def retrain(
    adapter: Annotated[str, typer.Argument(help="The adapter: NAME, NAME:VERSION or NAME:ALIAS.")],
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Where the stages' adapter folders go.")
    ] = Path("retrained"),
    base_model: Annotated[
        str | None, typer.Option("--base-model", help="Base model (default: the adapter's).")
    ] = None,
    lake: LakeOption = None,
) -> None:
    """Train an adapter again on the current tables: its recorded stages (selection SQL,
    hyperparameters) from the base model, e.g. after `trajlake forget` marked it."""
    the_lake = resolve_lake(lake, must_exist=True)
    try:
        result = run_stages(the_lake, adapter, output_dir, base_model=base_model)
    except TrainingError as exc:
        raise fail(str(exc)) from None
    typer.echo(
        f"retrained {adapter} ({' -> '.join(result.stages)}) on the current tables: {result.adapter_dir}; "
        f"publish it with `trajlake publish {result.adapter_dir}`"
    )


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("forget")(forget)
app.command("retrain")(retrain)
