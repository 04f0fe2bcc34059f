"""Replay each recording into the real collector and compare its trajectory with expected/<config>.json.

    python -m tests.ingest.frameworks.check_corpus [NAME ...] [--verbose]

The corpus tests (`tests/ingest/frameworks/test_frameworks.py`) assert the same; this prints, per
configuration, `OK` or every field that differs (`field: got ... expected ...`) and every
request the collector did not answer 2xx, which is handy after a re-capture.

Run from the repository root so `ingest`/`store` are this checkout's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.ingest.frameworks.replay import compare, configurations, expected_of, replay


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    names = args or configurations()
    failing = 0
    with tempfile.TemporaryDirectory(prefix="trajlake-corpus-") as tmp:
        for name in names:
            expected = expected_of(name)
            try:
                rows, rewards, answers = replay(name, Path(tmp))
                diffs = compare(expected, rows, rewards)
            except Exception as exc:
                answers, diffs = [], [f"replay failed: {type(exc).__name__}: {exc}"]
            if diffs:
                failing += 1
            print(f"{name}: {'OK' if not diffs else f'{len(diffs)} difference(s)'}")
            for line in answers:
                print(f"    collector answered {line}")
            for line in diffs:
                print(f"    {line}")
    print(f"{len(names) - failing} OK, {failing} with differences")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
