"""Batch scoring of trajectories: programmatic rewards, SQL rewards and RULER, written to `rewards`.

Public surface (the CLI and the Prefect flows call these):

- `score(lake, reward, ScoreConfig(...), judge=JudgeConfig(...)) -> ScoreSummary`
- `combine(lake, weights, name="combined") -> CombineSummary`
- `agreement(lake, "ruler", "exact_match") -> AgreementReport`
- `get_reward(spec) -> ProgrammaticReward`, `evaluate_reward(reward, trajectory, scenario)`,
  `BUILTIN_REWARDS`: the pure reward registry (evaluation gates use it directly)
- `resolve_reward_key(value, scored) -> (spec, name)`, `reward_name(spec)`: the one reading of a
  `reward` setting, written as a spec or as the name of a scored reward
- `ruler_score_group(trajectories, JudgeConfig(...)) -> GroupVerdict`: RULER on one group
- `scenario_scores(lake, reward, group_ids)`, `compare(reward, candidate, baseline) -> Comparison`,
  `evaluation_table(stages)`, `production_success(lake, reward)`, `record_evaluation`:
  evaluation statistics (bootstrap CIs, paired differences, a run's learning curve);
  `evaluate_policies(lake, measure, candidate=..., baseline=...)`: the evaluation procedure
- `reward_stats(lake, reward, group_ids) -> RewardStats`: a round's reward over its groups
"""

from judging.agreement import AgreementReport, agreement, spearman
from judging.combine import CombineSummary, combine, combine_values, combined_scorer
from judging.config import JudgeConfig, ScoreConfig
from judging.errors import (
    ConfigValueError,
    JudgeCallError,
    JudgeConfigError,
    JudgeUnreachableError,
    JudgingError,
    RewardInputError,
    RewardSpecError,
    SqlRewardError,
)
from judging.evaluate import Evaluation, Measured, NothingScored, evaluate_policies
from judging.evaluation_stats import (
    Comparison,
    Difference,
    PolicyScore,
    StageScore,
    bootstrap_ci,
    compare,
    evaluation_table,
    independent_difference,
    production_success,
    record_evaluation,
    scenario_scores,
)
from judging.registry import (
    BUILTIN_REWARDS,
    ProgrammaticReward,
    RewardOutcome,
    builtin_names,
    evaluate_reward,
    from_function,
    get_reward,
    registered_rewards,
    resolve_reward_key,
    reward_name,
)
from judging.rewards.base import RewardScope, needs_expected, reward_scope, reward_version
from judging.ruler import (
    DEFAULT_RUBRIC,
    GroupVerdict,
    JudgeVerdict,
    RulerJudge,
    ruler_score_group,
    ruler_scorer,
)
from judging.sql_reward import SqlReward
from judging.stage import score
from judging.summary import RewardStats, ScoreSummary, ValueStats, reward_stats

__all__ = [
    "BUILTIN_REWARDS",
    "DEFAULT_RUBRIC",
    "AgreementReport",
    "CombineSummary",
    "Comparison",
    "ConfigValueError",
    "Difference",
    "Evaluation",
    "GroupVerdict",
    "JudgeCallError",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeUnreachableError",
    "JudgeVerdict",
    "JudgingError",
    "Measured",
    "NothingScored",
    "PolicyScore",
    "ProgrammaticReward",
    "RewardInputError",
    "RewardOutcome",
    "RewardScope",
    "RewardSpecError",
    "RewardStats",
    "RulerJudge",
    "ScoreConfig",
    "ScoreSummary",
    "SqlReward",
    "SqlRewardError",
    "StageScore",
    "ValueStats",
    "agreement",
    "bootstrap_ci",
    "builtin_names",
    "combine",
    "combine_values",
    "combined_scorer",
    "compare",
    "evaluate_policies",
    "evaluate_reward",
    "evaluation_table",
    "from_function",
    "get_reward",
    "independent_difference",
    "needs_expected",
    "production_success",
    "record_evaluation",
    "registered_rewards",
    "resolve_reward_key",
    "reward_name",
    "reward_scope",
    "reward_stats",
    "reward_version",
    "ruler_score_group",
    "ruler_scorer",
    "scenario_scores",
    "score",
    "spearman",
]
