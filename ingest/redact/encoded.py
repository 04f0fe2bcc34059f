r"""Secrets behind an encoding: percent-encoding (URLs, form bodies), JSON `\u` escapes,
hex and base64.

The rules of `ingest.redact.rules` read text as written, so a PEM block in a query
string (`-----BEGIN%20RSA%20PRIVATE%20KEY-----%0A...`), a connection string passed as a
URL parameter (`postgresql%3A%2F%2Fapp%3Apw%40db`), a key base64- or hex-encoded into a
config blob or an Azure SAS URL written by Go's JSON encoder (`\u0026sig=...`) slips past
them. Here the encoded runs of a value are decoded, the decoded texts of all values are
redacted together by the caller's redaction (one vectorised pass, which may decode
again: a base64 blob inside a URL), and a run whose decoded text changed is written back
redacted and encoded the way it was:

- a percent-encoded run keeps its text around the change, escapes included, and the
  changed middle is percent-encoded again, the redaction marker readable
  (`postgresql%3A%2F%2Fapp%3A[REDACTED]%40db`);
- a value with `\u` escapes of ASCII characters (`ingest.redact.json_escapes`) is read
  whole with them decoded and keeps its escapes around the change;
- a hex run (`ingest.redact.hex_runs`) is the hex of its redacted text, in its case;
- a base64 run (`ingest.redact.base64_runs`) is the base64 of its redacted text,
  padded, line-wrapped and slash-escaped as the original was, so it still decodes (to
  text without the secret).

Only runs that decode to text are examined: base64 or hex that decodes to anything else
(an image, a digest, an id that happens to use the alphabet) fails on its first bytes
and is kept as it is, unread. This runs on the prefilter's rows only (`ingest.redact`),
whose `PERCENT_ESCAPE`, `JSON_ASCII_ESCAPE`, `HEX_TEXT` and `BASE64_TEXT` parts are what
send encoded text here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from ingest.redact.base64_runs import base64_runs
from ingest.redact.hex_runs import hex_runs
from ingest.redact.json_escapes import escaped_run
from ingest.redact.runs import Run, changed_middle, compiled

# A maximal run of URL text holding at least one escape: it stops at spaces, quotes,
# angle brackets and backslashes (a JSON escape is never part of a URL's encoding).
PERCENT_RUN = r"(?:[^\s\"'<>\\%]|%[0-9A-Fa-f]{2})*%[0-9A-Fa-f]{2}(?:[^\s\"'<>\\%]|%[0-9A-Fa-f]{2})*"
_PERCENT_UNIT = re.compile(r"%[0-9A-Fa-f]{2}|.", re.DOTALL)
# The redaction markers' own characters stay readable when a change is percent-encoded back.
_MARKER_SAFE = "[]:_"


def redact_encoded(values: pa.Array, redact: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """`values` with every encoded run whose decoded text `redact` changes written back
    redacted in the same encoding (see the module docstring).

    `redact` takes and returns a string array of the same length: the decoded runs of all
    values go through it in one call.
    """
    texts = values.to_pylist()
    runs: list[tuple[int, Run]] = []
    for index, text in enumerate(texts):
        if text is not None:
            runs += [(index, run) for run in encoded_runs(text)]
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


def encoded_runs(text: str) -> list[Run]:
    r"""The runs of `text` to decode, none overlapping another. A value with `\u`
    escapes is one run, read whole: what else it encodes is decoded one level deeper,
    from its decoded text, as base64 inside a percent-encoded run is. Hex goes before
    base64, whose alphabet holds it."""
    whole = escaped_run(text)
    if whole is not None:
        return [whole]
    runs: list[Run] = []
    if "%" in text:
        runs += [_percent_run(match) for match in compiled(PERCENT_RUN).finditer(text)]
    for found in (hex_runs, base64_runs):
        taken = [(run.start, run.end) for run in runs]
        runs += [run for run in found(text) if not any(s < run.end and run.start < e for s, e in taken)]
    return runs


def _percent_run(match: Any) -> Run:
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
        head, tail = changed_middle(decoded, redacted)
        middle = redacted[head : len(redacted) - tail]
        encoded_middle = quote(middle.encode("latin-1", "replace"), safe=_MARKER_SAFE)
        return "".join(units[:head]) + encoded_middle + "".join(units[len(units) - tail :])

    return Run(match.start(), match.end(), decoded, encode)
