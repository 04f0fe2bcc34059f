"""Where a lake lives: its root, its filesystem, and the paths of its tables.

A lake is a directory: a local path, or an object-store URL (`s3://bucket/lake`) reached
through fsspec (s3fs honours the usual `AWS_*` variables, including `AWS_ENDPOINT_URL`
for S3-compatible servers). pyarrow writes through the same filesystem, and DuckDB
reads remote lakes through it too (`register_filesystem`), so no DuckDB extension has
to be downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.fs as pafs

from store.schema import table_spec

DEFAULT_LAKE = "./lake"


@dataclass
class Lake:
    """A trajectory lake rooted at `root` (a path or `protocol://` URL)."""

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        root = str(self.root)
        if "://" not in root:
            root = str(Path(root).expanduser().absolute())
        self.root = root.rstrip("/")

    @classmethod
    def of(cls, lake: Lake | str | os.PathLike[str]) -> Lake:
        """Accept a `Lake` or anything path-like (library functions take either)."""
        return lake if isinstance(lake, Lake) else cls(str(lake))

    # --- filesystems ---------------------------------------------------------------------

    @property
    def protocol(self) -> str:
        return self.root.split("://", 1)[0] if "://" in self.root else "file"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        """fsspec filesystem for listing, renaming and deleting (and DuckDB on remote lakes)."""
        return fsspec.filesystem(self.protocol, **self.storage_options)

    @cached_property
    def arrow_fs(self) -> pafs.FileSystem:
        """pyarrow filesystem for reading and writing Parquet."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    def fs_path(self, *parts: str) -> str:
        """Path as the filesystems above expect it (no protocol prefix for remote lakes)."""
        base = self.root.split("://", 1)[1] if not self.is_local else self.root
        return "/".join([base, *parts]) if parts else base

    def url(self, *parts: str) -> str:
        """Path or URL as DuckDB and users see it."""
        return "/".join([self.root, *parts]) if parts else self.root

    # --- tables --------------------------------------------------------------------------

    def table_dir(self, table: str) -> str:
        table_spec(table)
        return self.fs_path(table)

    def glob(self, table: str) -> str:
        """The glob any Parquet engine can use to read `table`."""
        table_spec(table)
        return self.url(table, "**", "*.parquet")

    def data_files(self, table: str) -> list[str]:
        """Committed Parquet files of a table (temporaries are never listed)."""
        directory = self.table_dir(table)
        if not self.is_local:
            # Object-store listings are cached per filesystem instance; other processes write too.
            self.fs.invalidate_cache()
        if not self.fs.exists(directory):
            return []
        found = self.fs.find(directory)
        return sorted(p for p in found if p.endswith(".parquet") and not _is_hidden(p, directory))

    def __str__(self) -> str:
        return self.root


def _is_hidden(path: str, under: str) -> bool:
    rel = path[len(under) :].lstrip("/")
    return any(part.startswith((".", "_")) for part in rel.split("/"))
