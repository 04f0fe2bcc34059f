"""`trajlake compact`, `migrate`: tidying the lake, upgrading it (apart from `sql`, whose start-up
would otherwise build compact's options from the writer's module)."""

from __future__ import annotations

from rich.console import Console

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import configured
from flows.commands.store_cmds import print_rows
from store.errors import StoreError
from store.maintenance import CompactConfig, compact
from store.migrate import migrate
from training.registry import lineage_versions


def compact_cmd(compaction: CompactConfig, lake: LakeOption = None) -> None:
    """Rewrite small files into large clustered ones (Delta OPTIMIZE + Z-order), then VACUUM.

    Safe while collectors write and queries read. Vacuum keeps the files of every table
    version a published adapter was trained on, whatever the retention.
    """
    the_lake = resolve_lake(lake)
    config = compaction
    console = Console(stderr=True)
    if config.vacuum and config.retention_hours < 1:
        # Delta readers list a version's files when they open it: a file vacuumed under a query
        # or a training run that opened the lake a moment ago fails it with `No files found`.
        console.print(
            f"[yellow]warning:[/] --retention-hours {config.retention_hours} vacuums replaced files at once: "
            "a query, replay or training run reading the lake now can fail (`No files found`); "
            "readers need the retention (README: Retention)",
            markup=True,
            highlight=False,
        )
    try:
        with console.status("compacting…") as status:
            results = compact(
                the_lake,
                config,
                keep_versions=lineage_versions(the_lake),
                on_table=lambda t: status.update(f"compacting `{t}`"),
            )
    except StoreError as exc:
        raise fail(str(exc)) from None
    print_rows(
        ["table", "version", "partitions", "files_removed", "files_added", "files_vacuumed"],
        [
            (r.table, r.version, r.partitions, r.files_removed, r.files_added, r.files_vacuumed)
            for r in results
        ],
        "table",
    )


def migrate_cmd(lake: LakeOption = None) -> None:
    """Upgrade a lake an older release wrote: Delta tables, typed columns (stop writers first).

    The Parquet-files release's tables become Delta tables; rows whose values an older release
    kept in JSON text only get their typed columns filled from it.
    """
    the_lake = resolve_lake(lake)
    console = Console(stderr=True)
    try:
        with console.status("migrating…") as status:
            results = migrate(the_lake, on_table=lambda t: status.update(f"migrating `{t}`"))
    except (StoreError, OSError) as exc:
        raise fail(f"migration stopped: {exc}; rerun `trajlake migrate` to continue") from None
    print_rows(
        ["table", "old_files", "old_rows", "rows", "typed_rows", "version"],
        [(r.table, r.files, r.rows_read, r.rows, r.typed_rows, r.version) for r in results],
        "table",
    )
    if any(r.files for r in results):
        console.print(f"old files moved to {the_lake.url('_legacy')}; delete them once the lake is checked")


# `trajlake compact`'s options: `store.maintenance.CompactConfig`'s fields (command line only).

app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("compact")(configured(compact_cmd, compaction=CompactConfig))
app.command("migrate")(migrate_cmd)
