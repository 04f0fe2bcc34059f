"""RULER's default rubric and the `scorer` string that versions a judge + rubric pair.

The rubric is hashed together with `PROMPT_VERSION` (the shape of the prompt around
it): a new rubric or a reworded prompt gives a new `scorer`, so scores from different
judging setups never mix in one reward column, and the cache never serves them.
"""

from __future__ import annotations

import hashlib

# Bump when the prompt template in `prompt.py` changes in a way that can change scores.
PROMPT_VERSION = "1"

DEFAULT_RUBRIC = """\
- A trajectory that achieves its goal should always score significantly higher than one that does not.
- A trajectory that achieves its goal more efficiently (fewer steps, fewer failed tool calls, \
shorter path) should score higher than one that achieves it less efficiently.
- If one trajectory is only slightly better than another, the difference in scores should be \
small. If it is significantly better, the difference should be large.
- Give partial credit to a trajectory that makes real progress towards its goal without \
completing it.
- Judge what the agent did and said, not how confident it sounds; a wrong answer stated \
confidently is still wrong.
"""


def rubric_hash(rubric: str | None) -> str:
    """Short, stable hash of the rubric (None: the default) and the prompt version."""
    text = DEFAULT_RUBRIC if rubric is None else rubric
    return hashlib.sha256(f"prompt-v{PROMPT_VERSION}\n{text.strip()}".encode()).hexdigest()[:12]


def ruler_scorer(model: str, rubric: str | None) -> str:
    """`ruler:<judge model>:rubric-<hash>`: the value of the `scorer` column for RULER rows."""
    return f"ruler:{model}:rubric-{rubric_hash(rubric)}"
