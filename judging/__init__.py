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

The package imports nothing (its modules load what they use: importing one of them, or
reading a section's settings, does not load the rest); each name is imported from its
module, e.g. `from judging.stage import score`.
"""
