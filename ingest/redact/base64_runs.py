"""Base64 runs that decode to text, lines wrapped at a fixed width joined (`ingest.redact.encoded`).

A wrapped block is lines of one width (a multiple of 4: 76 for MIME and `base64`, 64
for PEM), separated by line breaks (raw, `\\r\\n` included, or JSON-escaped), and a last
line no longer than the others. The last line may be as short as one character: it is
joined when the block decodes to text with it (a short word after a block, which would
not decode, stays out).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

from ingest.redact.rules import BASE64_TEXT_GROUPS
from ingest.redact.runs import Run, compiled, decode_utf8_text, is_text

# One line of base64 (slashes possibly JSON-escaped) and its padding; lines wrapped at a
# fixed width (MIME, `base64` without -w0) are joined below.
BASE64_LINE = rf"(?:[A-Za-z0-9+/]|\\+/){{{4 * BASE64_TEXT_GROUPS},}}(?:={{1,2}})?"
# The last line of a wrapped block, of any length (`BASE64_LINE` finds those of 16 or more).
_LAST_LINE = re.compile(r"(?:[A-Za-z0-9+/]|\\+/)+(?:={1,2})?")
# What may separate two lines of a wrapped base64 block: a line break, raw or JSON-escaped.
_LINE_BREAK = re.compile(r"(?:\\+r|\\+n|\r|\n){1,2}")
# A JSON escape whose letter would otherwise start a base64 line (`\nc2st...`).
_ESCAPE_LETTERS = "nrtbf"
# Enough of a base64 run to tell text from binary before decoding all of it.
_PROBE_CHARS = 64
_BASE64_CHAR = re.compile(r"[A-Za-z0-9+/=]")
# How many raw slashes at each end of a line a base64 run may start or end after.
_MAX_CUTS = 8


def base64_runs(text: str) -> list[Run]:
    """The base64 runs of `text` that decode to text, wrapped lines joined."""
    lines = []
    for match in compiled(BASE64_LINE).finditer(text):
        start = match.start()
        if start and text[start - 1] == "\\" and text[start] in _ESCAPE_LETTERS:
            start += 1  # `\nKEY`: the letter belongs to the escape
        lines.append((start, match.end()))
    runs: list[Run] = []
    at = 0
    while at < len(lines):
        group = [lines[at]]
        width = _width(text, *lines[at])
        # A wrapped block: lines of one width (a multiple of 4), the last one no longer.
        while (
            at + 1 < len(lines)
            and _continues(text, group, width)
            and _LINE_BREAK.fullmatch(text, group[-1][1], lines[at + 1][0]) is not None
            and _width(text, *lines[at + 1]) <= width
        ):
            at += 1
            group.append(lines[at])
        at += 1
        last = _short_last_line(text, group, width)
        for lines_tried in ([*group, last], group) if last is not None else (group,):
            found = (_base64_run(text, t, width) for t in _starts(text, lines_tried))
            run = next(filter(None, found), None)
            if run is not None:
                runs.append(run)
                break
    return runs


def _starts(text: str, lines: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """The block, then the block starting after each raw `/` of its first line (a line
    found in a URL or a path, `/cb/c2stcHJvai0...`, begins with what is not base64), and
    a single line also ending before each raw `/` (`.../c2stcHJvai0.../edit`)."""
    first_start, first_end = lines[0]
    slashes = [i for i in range(first_start, first_end) if text[i] == "/" and text[i - 1 : i] != "\\"]
    # A few cuts at each end: a path of many short parts (`a/b/c/...`) costs no more.
    ends = [first_end, *(slashes[::-1][:_MAX_CUTS] if len(lines) == 1 else ())]
    for start in (first_start, *(i + 1 for i in slashes[:_MAX_CUTS])):
        for end in ends:
            if end - start >= 4 * BASE64_TEXT_GROUPS:
                yield [(start, end), *lines[1:]]


def _continues(text: str, group: list[tuple[int, int]], width: int) -> bool:
    """Whether another line may follow the group: its lines so far are full (the block's
    width, a multiple of 4) and the last is not padded."""
    return width % 4 == 0 and _width(text, *group[-1]) == width and text[group[-1][1] - 1] != "="


def _short_last_line(text: str, group: list[tuple[int, int]], width: int) -> tuple[int, int] | None:
    """The line after the group when it is a block's last line, shorter than the others
    (`BASE64_LINE` finds only lines of 16 characters or more), after a line break; None
    otherwise.

    A single line counts as a block only at the widths encoders wrap at (64, 76): a
    line of another length followed by a short word is a line and a word."""
    if not _continues(text, group, width) or (len(group) == 1 and width not in (64, 76)):
        return None
    gap = _LINE_BREAK.match(text, group[-1][1])
    if gap is None:
        return None
    line = _LAST_LINE.match(text, gap.end())
    if line is None or _width(text, line.start(), line.end()) - line.group().count("=") >= width:
        return None
    if line.end() < len(text) and _BASE64_CHAR.match(text, line.end()):
        return None  # more of something else (`\\x`), not the block's end
    return line.start(), line.end()


def _width(text: str, start: int, end: int) -> int:
    """A base64 line's length in characters of base64 (escaping backslashes not counted)."""
    return end - start - text.count("\\", start, end)


def _base64_run(text: str, lines: list[tuple[int, int]], width: int) -> Run | None:
    """The block of `lines` (wrapped at `width`, its first line possibly shorter: cut
    after a `/`) decoded, with how to encode a redacted text the same way."""
    raw_lines = [text[s:e] for s, e in lines]
    escaped_slash = next((m.group() for line in raw_lines if (m := re.search(r"\\+/", line))), "/")
    body = "".join(line.replace(escaped_slash, "/") for line in raw_lines)
    padded = body.endswith("=")
    stripped = body.rstrip("=")
    if "\\" in stripped or len(stripped) % 4 == 1 or not _decodes_to_text(stripped[:_PROBE_CHARS]):
        return None
    decoded = _decode_text(stripped)
    if decoded is None:
        return None
    first = _width(text, *lines[0])
    separator = text[lines[0][1] : lines[1][0]] if len(lines) > 1 else ""

    def encode(redacted: str) -> str:
        out = base64.b64encode(redacted.encode()).decode()
        if not padded:
            out = out.rstrip("=")
        if separator:
            rest = out[first:]
            out = separator.join([out[:first], *(rest[i : i + width] for i in range(0, len(rest), width))])
        return out.replace("/", escaped_slash)

    return Run(lines[0][0], lines[-1][1], decoded, encode)


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
    return is_text(head.decode("utf-8", "ignore")) and _valid_utf8_prefix(head)


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
    except binascii.Error:
        return None
    return decode_utf8_text(data)
