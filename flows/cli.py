"""The `trajlake` command line: one Typer app whose commands live in `flows.commands`, one module per stage.

Commands are thin: they turn options into config objects, open the lake, call one
library function, and print where the results went. A command's module is imported
only when that command runs or shows its own help, so `trajlake sql` never pays for
torch, TRL or Prefect; options derived from the settings' declarations
(`flows.config.options`) are built then too. `trajlake --help` lists the commands from
`SUMMARIES` and imports none of them (tests/flows/test_startup.py, bench/startup.py).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from flows.commands import LazyGroup, command_app
from flows.commands.extras import install_hint, missing_extra

COMMANDS = {
    "sql": "store_cmds",
    "tables": "store_cmds",
    "compact": "maintenance_cmds",
    "migrate": "maintenance_cmds",
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


# What `trajlake --help` lists: each command's first sentence (tests/flows/test_startup.py holds
# them to the commands' own help), so listing the commands imports none of their modules.
SUMMARIES = {
    "sql": "Run read-only SQL against the lake's views (trajectories, messages, rewards, groups, ...).",
    "tables": "Each table's Delta version, rows, files, bytes and newest data (from the tables' logs).",
    "compact": "Rewrite small files into large clustered ones (Delta OPTIMIZE + Z-order), then VACUUM.",
    "migrate": "Upgrade a lake an older release wrote: Delta tables, typed columns (stop writers first).",
    "collect": (
        "OTLP/HTTP receiver: /v1/traces, /v1/logs, Langfuse /api/public/otel/v1/traces and "
        "/api/public/scores, GET /health."
    ),
    "assemble": "(Re)build trajectories and rewards from the raw `spans` table, deterministically.",
    "ingest": "Bring traces in from other systems (Langfuse) and conversations from files (JSONL).",
    "scenarios": "Make replayable scenarios from trajectories, or load them from JSONL.",
    "replay": (
        "Group sampling: G token-exact trajectories per scenario (resumable: complete groups are skipped)."
    ),
    "serve-sampler": (
        "Serve a model over an OpenAI/vLLM-compatible API (token-id prompts, n, logprobs) on CPU or GPU."
    ),
    "score": "Score trajectories with RULER, programmatic or SQL rewards; idempotent and resumable.",
    "combine": (
        "Combine named rewards with weights into the one reward training uses (default name `combined`)."
    ),
    "agreement": "Rank agreement of two rewards within groups (Spearman's rho, pairwise agreement).",
    "train": "Train LoRA adapters on the lake: SFT on conversations, GRPO on scored groups.",
    "publish": (
        "Publish an adapter version to the registry (checks vLLM compatibility; optional eval gate, "
        "hot-load, hub)."
    ),
    "evaluate": "Compare policies on the evaluation scenarios with paired 95% CIs; publishes nothing.",
    "pipeline": "Run the whole loop once as a Prefect flow.",
    "serve": "Register the ingest and pipeline deployments with their schedules and serve them.",
    "demo": (
        "The whole loop, offline, on a tiny local model (or `--model`): traces -> lake -> replay -> score"
        " -> SFT/GRPO -> evaluate every stage -> publish -> the adapter serves production (each step "
        "timed); every number printed is also written to `<workdir>/summary.json`."
    ),
    "config": (
        "Print every configuration key with the value in effect and where it came from (the environment, "
        "trajlake.toml or the default), and its meaning."
    ),
    "report": (
        "Write the lake's report: learning per stage, reward per round, sampler gap, production feedback "
        "over time, lineage, and a group viewer; open it in any browser."
    ),
    "model": "Base models trajlake knows by name: fetch (download + convert once), list.",
    "forget": (
        "Erase a user's, session's or trace's conversations (or a SQL selection) from every copy in the lake."
    ),
    "labels": "Labels: what a conversation's right answer was (`labels` table), from files or with feedback.",
    "retrain": (
        "Train an adapter again on the current tables: its recorded stages (selection SQL, "
        "hyperparameters) from the base model, e.g."
    ),
}


class TrajlakeGroup(LazyGroup):
    lazy = {name: f"flows.commands.{module}:app" for name, module in COMMANDS.items()}
    summaries = SUMMARIES
    unlisted = frozenset({"tiny-model"})  # hidden: the tests' and the demo's model


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
    try:
        load_command(sys.argv[1] if len(sys.argv) > 1 else "")
        app()
    except ImportError as error:
        # A command of an extra this install lacks (`trajlake train` on the core install): one
        # line naming the extra, exit 2, instead of the import's traceback.
        extra = missing_extra(error)
        if extra is None:
            raise
        words = sys.argv[1:2]
        command = words[0] if words and words[0] in COMMANDS else None
        print(f"error: {install_hint(extra, error, command)}", file=sys.stderr)
        sys.exit(2)


def load_command(name: str) -> None:
    """Import the module of command `name` (if it is one) with the garbage collector off, then
    freeze what the import made.

    A process runs one command: the modules it loads live until it exits, so the collections
    while it runs, and the one at exit, need never walk them. Collecting during the import
    and at exit was 0.04 s of `trajlake sql "select 1"`'s 0.32 s (bench/startup.py).
    """
    module = COMMANDS.get(name)
    if module is None:
        return
    gc.disable()
    try:
        importlib.import_module(f"flows.commands.{module}")
    finally:
        gc.freeze()
        gc.enable()


def cpu_defaults() -> None:
    """OpenMP threads spin briefly, then wait passively, unless the user chose how they wait
    (`OMP_WAIT_POLICY` or libgomp's `GOMP_SPINCOUNT`).

    Set before torch loads (its OpenMP runtime reads the variables once). On a CPU shared with
    other work, threads that spin for long between parallel regions (libgomp's default: ~3 ms)
    took the cores from the threads with work: a SmolLM2 decode step took 1,718 ms instead of
    133 ms beside one busy process (README: Performance). Waiting passively at once costs a
    thread's wake-up, ~90 us, at every parallel region, and a decode step runs ~1,000 of them;
    a spin of ~30 us (`SPIN_COUNT`) first catches the region that follows, idle or beside busy
    processes (a demo round 12% and 14% faster than passive alone, `docs/performance.md`).
    """
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


#: libgomp's spins before a waiting thread sleeps (~100,000 a millisecond, by its own estimate).
SPIN_COUNT = 3000


if __name__ == "__main__":
    main()
