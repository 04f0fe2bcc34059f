"""Reading a JSONL file's lines within stated limits: size, nesting, numbers.

A file is read one line at a time, and a line no further than `max_line_bytes` (16 MiB by
default, `--max-line-bytes`): a longer line is refused after reading one byte past the
limit, so memory stays bounded whatever the file holds. A line is parsed with Python's
`json`, refusing what JSON does not have (`NaN`, `Infinity`) and numbers that overflow a
double (`1e999`), and a document nested deeper than `MAX_DEPTH` levels (Python's parser
would end in a `RecursionError` near 1,000; no conversation needs a tenth of that). Every
refusal names `file:line`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

from ingest.errors import MalformedPayload
from ingest.jsonl.convert import LineError

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
FIX = "fix the file and import it again"
MAX_DEPTH = 100  # objects and lists inside each other, the line's own object included


def _no_constant(name: str) -> Any:
    raise LineError(f"`{name}` is not a JSON number; values must be finite numbers")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise LineError(f"the number `{text[:40]}` is out of range; values must be finite numbers")
    return value


def _depth_under(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` levels (iterative: no recursion to run out of)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def parse_line(text: str) -> Any:
    """One line's JSON value, or `LineError` saying why not."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise LineError(f"the line nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise LineError(str(exc)) from None
    if not _depth_under(value, MAX_DEPTH):
        raise LineError(f"the line nests deeper than {MAX_DEPTH} levels")
    return value


def read_lines(
    path: str | os.PathLike[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, what: str = "conversation"
) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line of `path`; `MalformedPayload`
    naming `path:line` (and `what` a line holds) for the first line that is too long, not
    UTF-8 or not a JSON value."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after the last line
    except OSError as exc:
        raise MalformedPayload("import file", str(exc), path=str(path), fix=FIX) from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(max_line_bytes + 1)
            except OSError as exc:
                raise MalformedPayload(
                    "import file", str(exc), path=f"{path}:{number + 1}", fix=FIX
                ) from None
            if not raw:
                return
            number += 1
            body = raw.rstrip(b"\r\n")
            if len(body) > max_line_bytes:
                raise MalformedPayload(
                    what,
                    f"the line is longer than the limit of {max_line_bytes:,} bytes (`--max-line-bytes`)",
                    path=f"{path}:{number}",
                    fix=FIX,
                )
            if not body.strip():
                continue
            try:
                yield number, parse_line(body.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise MalformedPayload(
                    what, f"not UTF-8 at byte {exc.start}", path=f"{path}:{number}", fix=FIX
                ) from None
            except LineError as exc:
                raise MalformedPayload(what, str(exc), path=f"{path}:{number}", fix=FIX) from None
