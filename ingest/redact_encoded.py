"""Secrets behind an encoding: percent-encoding (URLs, form bodies) and base64.

The rules of `ingest.redact_rules` read text as written, so a PEM block in a query
string (`-----BEGIN%20RSA%20PRIVATE%20KEY-----%0A...`), a connection string passed as a
URL parameter (`postgresql%3A%2F%2Fapp%3Apw%40db`) or a key base64-encoded into a config
blob slips past them. Here the encoded runs of a value are decoded, the decoded texts of
all values are redacted together by the caller's redaction (one vectorised pass, which may
decode again: a base64 blob inside a URL), and a run whose decoded text changed is
written back redacted and encoded the way it was:

- a percent-encoded run keeps its text around the change, escapes included, and the
  changed middle is percent-encoded again, the redaction marker readable
  (`postgresql%3A%2F%2Fapp%3A[REDACTED]%40db`);
- a base64 run is the base64 of its redacted text, padded, line-wrapped and slash-escaped
  as the original was, so it still decodes (to text without the secret).

Only runs that decode to text are examined: base64 that decodes to anything else (an
image, a digest, an id that happens to use base64's alphabet) fails on its first bytes
and is kept as it is, unread. This runs on the prefilter's rows only (`ingest.redact`),
whose `PERCENT_ESCAPE` and `BASE64_TEXT` parts are what send encoded text here.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import re2

from ingest.redact_rules import BASE64_TEXT_GROUPS

# A maximal run of URL text holding at least one escape: it stops at spaces, quotes,
# angle brackets and backslashes (a JSON escape is never part of a URL's encoding).
PERCENT_RUN = r"(?:[^\s\"'<>\\%]|%[0-9A-Fa-f]{2})*%[0-9A-Fa-f]{2}(?:[^\s\"'<>\\%]|%[0-9A-Fa-f]{2})*"
_PERCENT_UNIT = re.compile(r"%[0-9A-Fa-f]{2}|.", re.DOTALL)
# One line of base64 (slashes possibly JSON-escaped) and its padding; lines wrapped at a
# fixed width (MIME, `base64` without -w0) are joined below.
BASE64_LINE = rf"(?:[A-Za-z0-9+]|\\+/){{{4 * BASE64_TEXT_GROUPS},}}(?:={{1,2}})?"
# What may separate two lines of a wrapped base64 block: a line break, raw or JSON-escaped.
_LINE_BREAK = re.compile(r"(?:\\+r|\\+n|\r|\n){1,2}")
# A JSON escape whose letter would otherwise start a base64 line (`\nc2st...`).
_ESCAPE_LETTERS = "nrtbf"
# The redaction markers' own characters stay readable when a change is percent-encoded back.
_MARKER_SAFE = "[]:_"
# Enough of a base64 run to tell text from binary before decoding all of it.
_PROBE_CHARS = 64


@functools.lru_cache(maxsize=4)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern)


def redact_encoded(values: pa.Array, redact: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """`values` with every percent-encoded or base64 run whose decoded text `redact`
    changes written back redacted in the same encoding (see the module docstring).

    `redact` takes and returns a string array of the same length: the decoded runs of all
    values go through it in one call.
    """
    texts = values.to_pylist()
    runs: list[tuple[int, _Run]] = []
    for index, text in enumerate(texts):
        if text is not None:
            runs += [(index, run) for run in _encoded_runs(text)]
    if not runs:
        return values
    decoded = pa.array([run.decoded for _, run in runs], type=pa.string())
    redacted = redact(decoded).to_pylist()
    changes: dict[int, list[tuple[int, int, str]]] = {}
    for (index, run), new in zip(runs, redacted, strict=True):
        if new != run.decoded:
            changes.setdefault(index, []).append((run.start, run.end, run.encode(new)))
    if not changes:
        return values
    for index, edits in changes.items():
        text = texts[index]
        # Runs of one value never overlap; later ones first keeps earlier offsets valid.
        for start, end, replacement in sorted(edits, reverse=True):
            text = text[:start] + replacement + text[end:]
        texts[index] = text
    return pa.array(texts, type=values.type)


@dataclass(frozen=True)
class _Run:
    """One encoded run of a value: where it lies, its decoded text, and how to encode a
    redacted version of that text the same way."""

    start: int
    end: int
    decoded: str
    encode: Callable[[str], str]


def _encoded_runs(text: str) -> list[_Run]:
    """The runs of `text` to decode, none overlapping another: base64 inside a
    percent-encoded run is decoded one level deeper, from the run's decoded text."""
    runs = []
    if "%" in text:
        runs += [_percent_run(match) for match in _compiled(PERCENT_RUN).finditer(text)]
    percent = [(run.start, run.end) for run in runs]
    runs += [
        run
        for run in _base64_runs(text)
        if not any(start < run.end and run.start < end for start, end in percent)
    ]
    return runs


def _percent_run(match: Any) -> _Run:
    """A percent-encoded run decoded byte for byte (Latin-1: one character per byte, so a
    position in the decoded text is a position in the run's units, and bytes that are not
    UTF-8 still decode). `+` is a space in form encoding, where spaces are never `%20`."""
    encoded = match.group()
    units = _PERCENT_UNIT.findall(encoded)
    plus_is_space = "+" in encoded and "%20" not in encoded
    chars = [
        chr(int(unit[1:], 16)) if len(unit) == 3 else (" " if plus_is_space and unit == "+" else unit)
        for unit in units
    ]
    decoded = "".join(chars)

    def encode(redacted: str) -> str:
        # The text around the change keeps its original units; the change is encoded anew.
        head = _common_prefix(decoded, redacted)
        tail = _common_prefix(decoded[head:][::-1], redacted[head:][::-1])
        middle = redacted[head : len(redacted) - tail]
        encoded_middle = quote(middle.encode("latin-1", "replace"), safe=_MARKER_SAFE)
        return "".join(units[:head]) + encoded_middle + "".join(units[len(units) - tail :])

    return _Run(match.start(), match.end(), decoded, encode)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _base64_runs(text: str) -> list[_Run]:
    """The base64 runs of `text` that decode to text, wrapped lines joined."""
    lines = []
    for match in _compiled(BASE64_LINE).finditer(text):
        start = match.start()
        if start and text[start - 1] == "\\" and text[start] in _ESCAPE_LETTERS:
            start += 1  # `\nKEY`: the letter belongs to the escape
        lines.append((start, match.end()))
    runs: list[_Run] = []
    at = 0
    while at < len(lines):
        group = [lines[at]]
        width = _width(text, *lines[at])
        # A wrapped block: lines of one width (a multiple of 4), the last one no longer.
        while (
            at + 1 < len(lines)
            and width % 4 == 0
            and _width(text, *group[-1]) == width
            and text[group[-1][1] - 1] != "="
            and _LINE_BREAK.fullmatch(text, group[-1][1], lines[at + 1][0]) is not None
            and _width(text, *lines[at + 1]) <= width
        ):
            at += 1
            group.append(lines[at])
        at += 1
        run = _base64_run(text, group)
        if run is not None:
            runs.append(run)
    return runs


def _width(text: str, start: int, end: int) -> int:
    """A base64 line's length in characters of base64 (escaping backslashes not counted)."""
    return end - start - text.count("\\", start, end)


def _base64_run(text: str, lines: list[tuple[int, int]]) -> _Run | None:
    raw_lines = [text[s:e] for s, e in lines]
    escaped_slash = next((m.group() for line in raw_lines if (m := re.search(r"\\+/", line))), "/")
    body = "".join(line.replace(escaped_slash, "/") for line in raw_lines)
    padded = body.endswith("=")
    stripped = body.rstrip("=")
    if len(stripped) % 4 == 1 or not _decodes_to_text(stripped[:_PROBE_CHARS]):
        return None
    decoded = _decode_text(stripped)
    if decoded is None:
        return None
    width = _width(text, *lines[0]) if len(lines) > 1 else 0
    separator = text[lines[0][1] : lines[1][0]] if len(lines) > 1 else ""

    def encode(redacted: str) -> str:
        out = base64.b64encode(redacted.encode()).decode()
        if not padded:
            out = out.rstrip("=")
        if width:
            out = separator.join(out[i : i + width] for i in range(0, len(out), width))
        return out.replace("/", escaped_slash)

    return _Run(lines[0][0], lines[-1][1], decoded, encode)


def is_base64_text(token: str) -> bool:
    """Whether `token` is base64 of text: the encoded pass has already read it (a random
    key decodes to 30 printable bytes about once in 10^12)."""
    stripped = token.replace("\\", "").rstrip("=")
    return len(stripped) % 4 != 1 and _decode_text(stripped) is not None


def _decodes_to_text(probe: str) -> bool:
    """Whether the first characters of a base64 run decode to the start of a text."""
    probe = probe[: len(probe) - len(probe) % 4]
    try:
        head = binascii.a2b_base64(probe, strict_mode=True)
    except binascii.Error:
        return False
    # A character cut at the probe's end is no reason to refuse.
    return _is_text(head.decode("utf-8", "ignore")) and _valid_utf8_prefix(head)


def _valid_utf8_prefix(data: bytes) -> bool:
    for cut in range(4):
        try:
            data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def _decode_text(stripped: str) -> str | None:
    try:
        data = binascii.a2b_base64(stripped + "=" * (-len(stripped) % 4), strict_mode=True)
        decoded = data.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded if _is_text(decoded) else None


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _is_text(decoded: str) -> bool:
    return bool(decoded) and _CONTROL.search(decoded) is None
