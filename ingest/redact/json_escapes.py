r"""Text behind JSON `\u` escapes of ASCII characters, for `ingest.redact.encoded`.

Encoders escape characters the rules read as punctuation: Go's `encoding/json` writes
`&`, `<` and `>` as `\u0026`, `\u003c`, `\u003e` (an Azure SAS URL's `\u0026sig=...`
loses the `&` that starts a parameter, `\u003cAKIA...` the word boundary before a key),
.NET's `System.Text.Json` writes a nested document's quotes as `\u0022`, and some
clients escape every character (`\u0073\u006b\u002d...`). A value holding such an
escape is read with its `\u` escapes of ASCII characters decoded, at any depth of JSON
nested in strings (`\\u0026`); escapes of other characters (`\u00e9`, `\u4e2d`) are
text the rules need not read and stay as they are.

A redacted value keeps its original escapes around the change; the changed characters
are written escaped the way the value escaped them (a character the value only ever
wrote escaped is escaped again), the redaction markers' letters as they are.
"""

from __future__ import annotations

import difflib
import re

from ingest.redact.rules import JSON_ASCII_ESCAPE
from ingest.redact.runs import Run, changed_middle

# One character of a value: a `\u` escape of an ASCII character (backslashes doubled at
# each level of nesting) or any other character.
_UNIT = re.compile(JSON_ASCII_ESCAPE + "|.", re.DOTALL)
# Beyond this many changed characters the alignment skips popular characters (difflib's
# autojunk) to stay fast; the escapes it then cannot align are chosen by the rule above.
_EXACT_ALIGNMENT_CHARS = 4096
# Shorter stretches the alignment finds unchanged inside a change belong to the change.
_KEPT_MIN_CHARS = 8
# Characters of the redaction markers, written as they are.
_MARKER_CHARS = frozenset("[]:_ ")


def escaped_run(text: str) -> Run | None:
    r"""The whole of `text` as one run with its `\u` escapes of ASCII characters decoded
    (the rules need the context around a secret: a URL's `?`, a field's name), or None
    when it holds no such escape."""
    if "u00" not in text or re.search(JSON_ASCII_ESCAPE, text) is None:
        return None
    units = _UNIT.findall(text)
    decoded = "".join(chr(int(unit[-4:], 16)) if len(unit) > 1 else unit for unit in units)
    first = next(unit for unit in units if len(unit) > 1)
    prefix, upper = first[:-4], any(c in "ABCDEF" for c in first[-4:])
    raw = {unit for unit in units if len(unit) == 1}
    escaped_only = {chr(int(unit[-4:], 16)) for unit in units if len(unit) > 1} - raw

    def escape(new: str) -> str:
        out = []
        for char in new:
            if char in escaped_only and not (char.isalnum() or char in _MARKER_CHARS):
                code = f"{ord(char):04x}"
                out.append(prefix + (code.upper() if upper else code))
            else:
                out.append(char)
        return "".join(out)

    def encode(redacted: str) -> str:
        head, tail = changed_middle(decoded, redacted)
        old, new = decoded[head : len(decoded) - tail], redacted[head : len(redacted) - tail]
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=len(old) > _EXACT_ALIGNMENT_CHARS)
        opcodes = matcher.get_opcodes()
        middle = [
            "".join(units[head + i1 : head + i2])
            # A few characters a marker shares with the secret it replaced (the `k` of
            # `sk-` and of `api_key`) are the marker's: written as new, not as they were.
            if tag == "equal" and (j2 - j1 >= _KEPT_MIN_CHARS or n in (0, len(opcodes) - 1))
            else escape(new[j1:j2])
            for n, (tag, i1, i2, j1, j2) in enumerate(opcodes)
        ]
        return "".join([*units[:head], *middle, *units[len(units) - tail :]])

    return Run(0, len(text), decoded, encode)
