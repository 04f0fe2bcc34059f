"""Rewards that compare the final answer with the scenario's expected output.

>>> scen = {"expected": '{"answer": "Paris"}'}
>>> exact_match_reward({"final_output": "Paris"}, scen)
1.0
>>> normalized_match_reward({"final_output": "  paris. "}, scen)
1.0
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

from judging.rewards.base import needs_expected, reward_version
from judging.trajectory import ScenarioRow, Trajectory, expected_answer, final_answer

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Unicode-normalised, case-folded, without punctuation, articles and repeated whitespace.

    The SQuAD-style normalisation: "The  Eiffel Tower." and "eiffel tower" compare equal.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _candidates(expected: Any) -> list[str]:
    values = expected if isinstance(expected, list) else [expected]
    return [v if isinstance(v, str) else str(v) for v in values]


@needs_expected
@reward_version("1")
def exact_match_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
    """1.0 when the final answer equals the expected answer (or one of a list of them) exactly, else 0.0.

    Only surrounding whitespace is ignored. A trajectory with no final answer scores 0.0.
    """
    answer = final_answer(trajectory)
    expected = _candidates(expected_answer(scenario))
    return 1.0 if answer is not None and answer.strip() in [e.strip() for e in expected] else 0.0


@needs_expected
@reward_version("1")
def normalized_match_reward(trajectory: Trajectory, scenario: ScenarioRow | None) -> float:
    """1.0 when the normalised final answer equals a normalised expected answer (see `normalize_answer`)."""
    answer = final_answer(trajectory)
    expected = {normalize_answer(e) for e in _candidates(expected_answer(scenario))}
    return 1.0 if answer is not None and normalize_answer(answer) in expected else 0.0
