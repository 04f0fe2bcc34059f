"""What every decoder of `ingest.redact.encoded` hands back: encoded runs of a value, and
the checks that tell decoded text from binary."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2


@dataclass(frozen=True)
class Run:
    """One encoded run of a value: where it lies, its decoded text, and how to encode a
    redacted version of that text the same way."""

    start: int
    end: int
    decoded: str
    encode: Callable[[str], str]


@functools.lru_cache(maxsize=8)
def compiled(pattern: str) -> Any:
    """google-re2 on `str` (match offsets are string indices, as slicing needs), compiled once."""
    return re2.compile(pattern)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def is_text(decoded: str) -> bool:
    """Whether decoded bytes read as text: not empty, no control character but tab and line breaks."""
    return bool(decoded) and _CONTROL.search(decoded) is None


def decode_utf8_text(data: bytes) -> str | None:
    """`data` as text, or None when it is not UTF-8 text (binary: an image, a digest, an id)."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return decoded if is_text(decoded) else None


def common_prefix(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def changed_middle(decoded: str, redacted: str) -> tuple[int, int]:
    """(head, tail): how many characters at the start and at the end `redacted` kept of
    `decoded`; between them lies what redaction changed."""
    head = common_prefix(decoded, redacted)
    tail = common_prefix(decoded[head:][::-1], redacted[head:][::-1])
    return head, tail
