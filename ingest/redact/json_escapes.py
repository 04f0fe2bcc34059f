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
from collections.abc import Callable

from ingest.redact.rules import JSON_ASCII_ESCAPE
from ingest.redact.runs import Run, changed_middle

# A `\u` escape of any ASCII character, control characters included (a PEM block's line
# breaks), backslashes doubled at each level of nesting.
_ESCAPE = re.compile(r"\\+u00[0-7][0-9A-Fa-f]")
# One character of a value: such an escape or any other character.
_UNIT = re.compile(_ESCAPE.pattern + "|.", re.DOTALL)
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
    first = re.search(JSON_ASCII_ESCAPE, text) if "u00" in text else None
    if first is None:  # no escape of a printable character: nothing a rule would read
        return None
    decoded = _ESCAPE.sub(lambda m: chr(int(m.group()[-4:], 16)), text)

    def encode(redacted: str) -> str:
        units = _UNIT.findall(text)  # one per decoded character
        head, tail = changed_middle(decoded, redacted)
        old, new = decoded[head : len(decoded) - tail], redacted[head : len(redacted) - tail]
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=len(old) > _EXACT_ALIGNMENT_CHARS)
        opcodes = matcher.get_opcodes()
        escape = _escaper(units, first.group())
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


def _escaper(units: list[str], example: str) -> Callable[[str], str]:
    """How to write new characters into the value of `units`: those it only ever wrote
    escaped are escaped again (with `example`'s backslashes and letter case), the
    markers' characters and letters and digits never."""
    escaped = {chr(int(unit[-4:], 16)) for unit in units if len(unit) > 1}
    escaped_only = escaped - {unit for unit in units if len(unit) == 1}
    prefix, upper = example[:-4], any(c in "ABCDEF" for c in example[-4:])

    def escape(new: str) -> str:
        out = []
        for char in new:
            if char in escaped_only and not (char.isalnum() or char in _MARKER_CHARS):
                code = f"{ord(char):04x}"
                out.append(prefix + (code.upper() if upper else code))
            else:
                out.append(char)
        return "".join(out)

    return escape
