"""RULER: relative scoring of a group of trajectories by an LLM judge over any OpenAI-compatible endpoint."""

from judging.ruler.group import GroupVerdict, JudgeVerdict, RulerJudge, ruler_score_group
from judging.ruler.rubric import DEFAULT_RUBRIC, rubric_hash, ruler_scorer

__all__ = [
    "DEFAULT_RUBRIC",
    "GroupVerdict",
    "JudgeVerdict",
    "RulerJudge",
    "rubric_hash",
    "ruler_score_group",
    "ruler_scorer",
]
