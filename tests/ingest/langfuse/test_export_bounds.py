"""A Langfuse export is input from outside (issue 45 item 5): compressed exports are read
as streams, and a compression bomb, an endless line or a deeply nested document is
refused with a clear error, in bounded memory, with nothing written."""

from __future__ import annotations

import bz2
import gzip
import json
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ingest.langfuse.errors import ExportUnreadable, MalformedExport
from ingest.langfuse.export.importer import import_langfuse_export
from ingest.langfuse.source import MAX_RECORD_BYTES
from store.lake import Lake
from tests.ingest.langfuse.conftest import cli, seed_project, sql
from tests.ingest.langfuse.standin import StandinLangfuse

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

MIB = 1 << 20
TABLES = ("spans", "trajectories", "rewards")
LINE = b'{"id": "' + b"x" * 1000 + b'"}\n'


def export_text() -> str:
    standin = StandinLangfuse()
    seed_project(standin, n=3)
    return "".join(json.dumps(t) + "\n" for t in standin.export_traces())


def write_gzip_stream(path: Path, chunks: Iterator[bytes]) -> Path:
    """A gzip file of `chunks`, compressed as they come (the bomb never sits in memory)."""
    with path.open("wb") as handle:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip container
        for chunk in chunks:
            handle.write(compressor.compress(chunk))
        handle.write(compressor.flush())
    return path


def write_zip_stream(path: Path, chunks: Iterator[bytes], name: str = "export.jsonl") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open(name, "w") as member:
        for chunk in chunks:
            member.write(chunk)
    return path


def repeated(piece: bytes, total: int) -> Iterator[bytes]:
    block = piece * (MIB // len(piece))
    for _ in range(total // MIB):
        yield block


def peak_mib(action: Callable[[], object]) -> tuple[BaseException | None, float]:
    """(what `action` raised, the peak of Python allocations while it ran, in MiB)."""
    tracemalloc.start()
    try:
        action()
        raised = None
    except Exception as exc:
        raised = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return raised, peak / MIB


@pytest.mark.parametrize("container", ["gzip", "zip"])
def test_a_compressed_export_imports_like_the_plain_one(container: str, tmp_path: Path) -> None:
    text = export_text()
    plain = tmp_path / "export.jsonl"
    plain.write_text(text)
    packed = tmp_path / f"export.{container}"
    if container == "gzip":
        packed.write_bytes(gzip.compress(text.encode()))
    else:
        write_zip_stream(packed, iter([text.encode()]))
    lakes = Lake(str(tmp_path / "plain")), Lake(str(tmp_path / "packed"))
    import_langfuse_export(lakes[0], plain)
    report = import_langfuse_export(lakes[1], packed)
    assert report.traces == 3
    query = "SELECT trace_id, messages FROM trajectories ORDER BY trace_id"
    assert sql(lakes[1], query) == sql(lakes[0], query)


@pytest.mark.parametrize(
    ("container", "piece", "words"),
    [
        # 256 MiB of 1 KiB lines: the expansion bound stops it after 64 MiB.
        ("gzip", LINE, "compression bomb"),
        ("zip", LINE, "compression bomb"),
        # 256 MiB without a line break: the line bound stops it.
        ("gzip", b"\0", f"longer than the limit of {MAX_RECORD_BYTES:,} bytes"),
    ],
    ids=["gzip-lines", "zip-lines", "gzip-one-line"],
)
def test_a_compression_bomb_is_refused_in_bounded_memory_and_writes_nothing(
    container: str, piece: bytes, words: str, tmp_path: Path, lake: Lake
) -> None:
    write = write_zip_stream if container == "zip" else write_gzip_stream
    bomb = write(tmp_path / f"bomb.{container}", repeated(piece, 256 * MIB))
    assert bomb.stat().st_size < MIB
    raised, peak = peak_mib(lambda: import_langfuse_export(lake, bomb))
    assert isinstance(raised, ExportUnreadable) and words in str(raised), raised
    assert peak < 3 * MAX_RECORD_BYTES / MIB, f"peak {peak:.0f} MiB"  # not the 256 MiB it expands to
    assert not any(lake.has_table(t) for t in TABLES)

    result = cli("ingest", "langfuse", "--file", str(bomb), "--lake", lake.root, "--no-progress")
    assert result.exit_code == 2 and words in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize(
    ("layout", "depth"),
    # 100,000 levels: past every parser's limit; 300: readable, but deeper than orjson
    # writes JSON text (254), which used to end in a TypeError traceback.
    [("jsonl", 100_000), ("json", 100_000), ("jsonl", 300), ("json", 300)],
)
def test_a_deeply_nested_document_is_a_clear_refusal(
    layout: str, depth: int, tmp_path: Path, lake: Lake
) -> None:
    deep = "[" * depth + "]" * depth
    observation = (
        '{"id": "o", "traceId": "t", "type": "GENERATION", "startTime": "2026-08-01T10:00:00Z", '
        f'"input": {deep}}}'
    )
    record = f'{{"id": "t", "timestamp": "2026-08-01T10:00:00Z", "observations": [{observation}]}}'
    path = tmp_path / f"deep.{layout}"
    if layout == "jsonl":  # on line 2, after a good trace
        path.write_text(export_text().splitlines()[0] + "\n" + record + "\n")
    else:
        path.write_text(f"[{record}]")
    raised, peak = peak_mib(lambda: import_langfuse_export(lake, path))
    assert isinstance(raised, MalformedExport), raised
    assert [p.reason for p in raised.problems] == ["invalid_json"]
    assert "nested too deep" in str(raised) and raised.problems[0].line == (2 if layout == "jsonl" else 1)
    assert peak < 64
    assert not any(lake.has_table(t) for t in TABLES)


def test_archives_it_cannot_read_are_named(tmp_path: Path, lake: Lake) -> None:
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as archive:
        archive.writestr("a.jsonl", export_text())
        archive.writestr("b.jsonl", export_text())
    packed = tmp_path / "export.jsonl.bz2"
    packed.write_bytes(bz2.compress(export_text().encode()))
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(export_text().encode())[:200])
    for path, words in (
        (two, "exactly one export file; it holds 2 (a.jsonl, b.jsonl)"),
        (packed, "bzip2-compressed; decompress it first"),
        (truncated, "compressed data is damaged"),
    ):
        with pytest.raises(ExportUnreadable) as refused:
            import_langfuse_export(lake, path)
        assert words in str(refused.value) and str(path) in str(refused.value)
    assert not any(lake.has_table(t) for t in TABLES)
