"""Where a lake lives: its root, how to reach it, and its tables as Delta tables.

A lake is a directory: a local path, or an object-store URL (`s3://bucket/lake`). Each
table is a Delta Lake table in `<lake>/<table>/` (its `_delta_log/` next to its Parquet
files). delta-rs reads and writes the tables; SQL reads their current files through
pyarrow (`arrow_fs`: Arrow's own file systems for local and S3 lakes), so no DuckDB
extension has to be downloaded. Credentials come from the usual `AWS_*` variables (`AWS_ENDPOINT_URL` for
S3-compatible servers), or from `storage_options` in fsspec's spelling, which is
translated for delta-rs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.errors import LakeUnusable
from store.schema import TABLES, table_spec

if TYPE_CHECKING:
    import fsspec
    import pyarrow.fs as pafs

DEFAULT_LAKE = "./lake"


@dataclass
class Lake:
    """A trajectory lake rooted at `root` (a path or `protocol://` URL)."""

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)  # fsspec's spelling
    # SQL on this lake's connections reads the lake's tables and nothing else: no local
    # file, no other bucket, no URL (`store.catalog.connection.connect`). For anything that runs SQL it did
    # not write itself; off for a user's own shell, where `read_csv('notes.csv')` is fine.
    sql_lake_only: bool = False

    def __post_init__(self) -> None:
        root = str(self.root)
        if "://" not in root:
            root = str(Path(root).expanduser().absolute())
        self.root = root.rstrip("/")

    @classmethod
    def of(cls, lake: Lake | str | os.PathLike[str]) -> Lake:
        """Accept a `Lake` or anything path-like (library functions take either)."""
        return lake if isinstance(lake, Lake) else cls(str(lake))

    @property
    def protocol(self) -> str:
        return self.root.split("://", 1)[0] if "://" in self.root else "file"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        """fsspec filesystem (DuckDB on remote lakes, the registry, caches)."""
        # Imported here: a local lake's SQL never uses it (`trajlake sql` starts without it).
        import fsspec

        return fsspec.filesystem(self.protocol, **self.storage_options)

    @cached_property
    def delta_options(self) -> dict[str, str]:
        """delta-rs storage options: fsspec's `key`/`secret`/`endpoint_url` in delta-rs's names."""
        options = self.storage_options
        client = options.get("client_kwargs") or {}
        out = {
            "AWS_ACCESS_KEY_ID": options.get("key"),
            "AWS_SECRET_ACCESS_KEY": options.get("secret"),
            "AWS_SESSION_TOKEN": options.get("token"),
            "AWS_ENDPOINT_URL": client.get("endpoint_url") or options.get("endpoint_url"),
            "AWS_REGION": client.get("region_name"),
        }
        endpoint = out["AWS_ENDPOINT_URL"] or os.environ.get("AWS_ENDPOINT_URL") or ""
        if endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
        return {k: str(v) for k, v in out.items() if v}

    @cached_property
    def arrow_fs(self) -> pafs.FileSystem:
        """The file system pyarrow reads the lake's files with (the views' scans).

        Arrow's own for local and S3 lakes, so no Python runs on Arrow's IO threads while a
        query reads; another protocol goes through its fsspec file system (`fs`).
        """
        import pyarrow.fs as pafs  # 10 ms: `trajlake sql` on a local lake reads no file through it

        if self.is_local:
            return pafs.LocalFileSystem()
        if self.protocol in ("s3", "s3a"):
            options = self.delta_options
            endpoint = options.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
            return pafs.S3FileSystem(
                access_key=options.get("AWS_ACCESS_KEY_ID"),
                secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
                session_token=options.get("AWS_SESSION_TOKEN"),
                region=options.get("AWS_REGION"),
                endpoint_override=endpoint.split("://", 1)[-1] if endpoint else None,
                scheme="http" if (endpoint or "").startswith("http://") else "https",
            )
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    def fs_path(self, *parts: str) -> str:
        """Path as fsspec expects it (no protocol prefix for remote lakes)."""
        base = self.root.split("://", 1)[1] if not self.is_local else self.root
        return "/".join([base, *parts]) if parts else base

    def url(self, *parts: str) -> str:
        """Path or URL as DuckDB, delta-rs and users see it."""
        return "/".join([self.root, *parts]) if parts else self.root

    def table_dirs(self) -> list[str]:
        """The folder of every table, as SQL reads their files (with a trailing `/`): what a
        `sql_lake_only` connection may read. A local lake is named by its absolute and its
        real path too, so a symlinked folder reads the same."""
        roots = [self.root]
        if self.is_local and os.path.realpath(self.root) != self.root:
            roots.append(os.path.realpath(self.root))
        return [f"{root}/{table}/" for root in roots for table in TABLES]

    def table_uri(self, table: str) -> str:
        table_spec(table)
        return self.url(table)

    def commit_info(self, table: str, version: int) -> dict[str, Any]:
        """The `commitInfo` action of one commit of `table` (operation, metrics, timestamp), from
        its log entry; empty when the entry is gone or has none."""
        path = self.fs_path(table, "_delta_log", f"{version:020d}.json")
        try:  # through Arrow's file system, which SQL has loaded already (fsspec is 15 ms more)
            with self.arrow_fs.open_input_stream(path) as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return {}
        infos = (json.loads(line).get("commitInfo") for line in lines if line.strip())
        return next((info for info in infos if info is not None), {})

    def log_names(self, table: str) -> list[str]:
        """The names of the files in `table`'s Delta log folder (none for a table never written)."""
        log = self.fs_path(table_spec(table).name, "_delta_log")
        if self.is_local:
            return os.listdir(log) if os.path.isdir(log) else []
        from pyarrow.fs import FileSelector

        return [
            info.base_name for info in self.arrow_fs.get_file_info(FileSelector(log, allow_not_found=True))
        ]

    def has_table(self, table: str) -> bool:
        """Whether `table` exists as a Delta table (anything was ever committed to it): its log
        holds a commit or a checkpoint, delta-rs's own test (whose import is 20 ms of `trajlake
        sql`, which asks before any query)."""
        return any(log_version(name) is not None for name in self.log_names(table))

    def problem(self, *, must_exist: bool) -> str | None:
        """Why this lake cannot be used, or None: a local lake must be a directory (or not
        exist yet, unless `must_exist`); a lake that must exist holds at least one table.

        Readers ask with `must_exist=True`, so a mistyped path is an error naming it rather
        than a query over an empty lake; writers create the lake where nothing is yet.
        """
        if self.is_local:
            path = Path(self.root)
            existing = next((p for p in (path, *path.parents) if p.exists()), None)
            if existing is not None and not existing.is_dir():
                return f"`{existing}` is a file; a lake is a directory (check --lake / $TRAJLAKE_LAKE)"
            if must_exist and not path.exists():
                return (
                    f"no lake at `{self.root}`: the directory does not exist (check --lake / $TRAJLAKE_LAKE)"
                )
        if must_exist and not any(self.has_table(name) for name in TABLES):
            return (
                f"no lake at `{self.root}`: it holds none of the lake's tables ({', '.join(TABLES)}); "
                "`trajlake collect`, `trajlake ingest` or `store.writer.write` create them"
            )
        return None

    def __str__(self) -> str:
        return self.root


def log_version(name: str) -> int | None:
    """The version a Delta log file records: a commit (`00000000000000000003.json`) or a
    checkpoint (`...03.checkpoint.parquet`, multi-part and v2 ones too); None for anything
    else (`_last_checkpoint`, a writer's temporary file).

    >>> log_version("00000000000000000003.json"), log_version("_last_checkpoint")
    (3, None)
    """
    head, _, rest = name.partition(".")
    if len(head) == 20 and head.isdigit() and (rest == "json" or rest.startswith("checkpoint.")):
        return int(head)
    return None


def open_lake(root: str, *, sql_lake_only: bool = False, must_exist: bool = False) -> Lake:
    """The lake at `root`, checked (`Lake.problem`): how commands and flow stages open the lake
    they were configured with. Raises `LakeUnusable` naming the path."""
    lake = Lake(root, sql_lake_only=sql_lake_only)
    problem = lake.problem(must_exist=must_exist)
    if problem is not None:
        raise LakeUnusable(lake.root, problem)
    return lake
