"""Opening a Langfuse export file within bounds: plain, gzip or zip.

An export may arrive compressed (`export.jsonl.gz`, a `.zip` downloaded from a bucket),
and a file is input from outside: whatever it holds, reading it must cost bounded
memory and time. So:

- gzip and a zip of exactly one file are decompressed as a stream; other compressions are
  refused by their magic bytes (decompress those first);
- decompressed text may be at most `MAX_EXPANSION` times the file's size (beyond a
  floor of `EXPANSION_FLOOR_BYTES`): JSON compresses 5-20 times, a compression bomb
  thousands of times, and is refused after reading that much, not all of it;
- a JSONL line is read no further than `MAX_RECORD_BYTES`, and a JSON document (an array,
  an API page) is parsed whole only up to `MAX_DOCUMENT_BYTES`: larger exports are
  imported as JSONL, one record per line, which streams.
"""

from __future__ import annotations

import contextlib
import gzip
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ingest.langfuse.errors import ExportUnreadable

MIB = 1 << 20
MAX_RECORD_BYTES = 64 * MIB
MAX_DOCUMENT_BYTES = 512 * MIB
MAX_EXPANSION = 100
EXPANSION_FLOOR_BYTES = 64 * MIB
# Compressions recognised only to be refused clearly (read as text they are binary noise).
_OTHER_COMPRESSIONS = {b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"7z\xbc\xaf": "7z"}


class ExportStream:
    """A readable export (decompressed when it was compressed) and the bounds it is read in."""

    def __init__(self, path: Path, handle: BinaryIO, *, compressed: bool) -> None:
        self.path, self.handle, self.compressed = path, handle, compressed
        size = path.stat().st_size
        self.max_bytes = max(EXPANSION_FLOOR_BYTES, MAX_EXPANSION * size) if compressed else None

    def check_expansion(self) -> None:
        """Refuse a compressed file once it has expanded past its bound (a compression bomb)."""
        if self.max_bytes is not None and self.handle.tell() > self.max_bytes:
            raise ExportUnreadable(
                str(self.path),
                f"it decompresses to more than {self.max_bytes:,} bytes ({MAX_EXPANSION} times its "
                "size): a compression bomb, or an export to decompress before importing",
            )

    def read_document(self, head: bytes) -> bytes:
        """The rest of a JSON document after `head`, refused past `MAX_DOCUMENT_BYTES`."""
        limit = MAX_DOCUMENT_BYTES if self.max_bytes is None else min(MAX_DOCUMENT_BYTES, self.max_bytes)
        # In chunks: `read(limit)` would allocate the whole limit up front for a small file.
        chunks, size = [head], len(head)
        while size <= limit and (chunk := self.handle.read(min(8 * MIB, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
            self.check_expansion()
        raw = b"".join(chunks)
        if len(raw) > limit:
            raise ExportUnreadable(
                str(self.path),
                f"a JSON document over {limit:,} bytes is not parsed whole; export it as JSONL "
                "(one record per line), which is read line by line",
            )
        return raw

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, line) of a JSONL export, each read no further than `MAX_RECORD_BYTES`."""
        number = 0
        while True:
            line = self.handle.readline(MAX_RECORD_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
                raise ExportUnreadable(
                    str(self.path), f"line {number} is longer than the limit of {MAX_RECORD_BYTES:,} bytes"
                )
            self.check_expansion()
            yield number, line


def _refuse_declared(path: Path, declared: int) -> None:
    """Refuse a compressed export whose declared size is past the expansion bound at once.
    The declared size may lie; the stream is bounded as it is read (`check_expansion`)."""
    bound = max(EXPANSION_FLOOR_BYTES, MAX_EXPANSION * path.stat().st_size)
    if declared > bound:
        raise ExportUnreadable(
            str(path),
            f"it declares {declared:,} bytes decompressed, more than {bound:,} ({MAX_EXPANSION} times "
            "its size): a compression bomb, or an export to decompress before importing",
        )


@contextlib.contextmanager
def open_export(path: Path) -> Iterator[ExportStream]:
    """The export at `path`, decompressed if it is gzip or a zip of one file."""
    with path.open("rb") as raw:
        magic = raw.read(8)
    for prefix, name in _OTHER_COMPRESSIONS.items():
        if magic.startswith(prefix):
            raise ExportUnreadable(
                str(path), f"it is {name}-compressed; decompress it first (gzip and zip are read)"
            )
    if magic.startswith(b"\x1f\x8b"):
        # gzip's trailer is not read for a size: a cut file's last bytes are not one.
        with gzip.open(path, "rb") as handle:
            yield ExportStream(path, handle, compressed=True)  # type: ignore[arg-type]
        return
    if magic.startswith(b"PK\x03\x04"):
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise ExportUnreadable(str(path), f"it is not a readable zip ({exc})") from None
        with archive:
            members = [m for m in archive.infolist() if not m.is_dir()]
            if len(members) != 1:
                names = ", ".join(m.filename for m in members[:5]) or "none"
                raise ExportUnreadable(
                    str(path), f"a zip must hold exactly one export file; it holds {len(members)} ({names})"
                )
            _refuse_declared(path, members[0].file_size)  # a zip bomb took 198 s to be refused
            with archive.open(members[0]) as handle:
                yield ExportStream(path, handle, compressed=True)  # type: ignore[arg-type]
        return
    with path.open("rb") as handle:
        yield ExportStream(path, handle, compressed=False)
