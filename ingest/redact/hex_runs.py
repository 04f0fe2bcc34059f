"""Hex runs that decode to text: a secret's bytes written as hex (`736b2d70726f6a2d...`,
what `xxd -p`, `.hex()` and many debug dumps print), for `ingest.redact.encoded`.

Only runs that decode, byte for byte, to UTF-8 text are read: a digest, a trace id or
any hex of random bytes holds a byte that is not text within its first few bytes and is
kept as it is. A redacted run is written back as the hex of its redacted text, in the
run's own letter case.
"""

from __future__ import annotations

from ingest.redact.rules import HEX_TEXT_BYTES
from ingest.redact.runs import Run, compiled, decode_utf8_text

# A maximal run of hex digits long enough to hold HEX_TEXT_BYTES bytes (the prefilter's
# `HEX_TEXT` sends rows here only when such bytes may be text).
HEX_RUN = rf"[0-9A-Fa-f]{{{2 * HEX_TEXT_BYTES},}}"


def hex_runs(text: str) -> list[Run]:
    """The hex runs of `text` that decode to text. A run of odd length is read from its
    second digit (a word's last letter, `the 736b...` is never hex) and then from its first."""
    runs = []
    for match in compiled(HEX_RUN).finditer(text):
        start, end = match.start(), match.end()
        for first in (start + (end - start) % 2, start) if (end - start) % 2 else (start,):
            last = first + (end - first) // 2 * 2
            run = _hex_run(text, first, last)
            if run is not None:
                runs.append(run)
                break
    return runs


def _hex_run(text: str, start: int, end: int) -> Run | None:
    digits = text[start:end]
    decoded = decode_utf8_text(bytes.fromhex(digits))
    if decoded is None:
        return None
    upper = digits.upper() == digits and digits.lower() != digits

    def encode(redacted: str) -> str:
        out = redacted.encode().hex()
        return out.upper() if upper else out

    return Run(start, end, decoded, encode)
