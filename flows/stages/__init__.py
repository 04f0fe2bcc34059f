"""Stage functions: one per step of the loop, each turning the configuration into library calls.

These are what the Prefect tasks run (`flows.prefect_flows`), what the commands reuse,
and what tests call directly. Each takes the lake the flow opened once (`lake_of`) and the
sections of the validated `Settings` it reads, as keywords named after their tables
(`select=settings.select`; the three every replay reads travel as one `ReplaySections`), calls
one library function of `ingest`, `training` or `judging` with the config objects those
libraries declare, and returns a small dataclass: the library's own result where it has
one (`judging`'s `ScoreSummary` and `RewardStats`, `training`'s `TrainResult` and
`PublishedAdapter`), else one declared beside the stage. Callers read attributes; only the
flows turn results into dicts, for their own JSON-able results and their artifacts. Results
cross processes under the Dask task runner, so each pickles. No data logic lives here:
queries and statistics belong to the library that owns the data.
"""

from flows.stages.common import StageError, base_model, lake_of, loadable_base_model, run_dir, work_dir
from flows.stages.evaluate import (
    Publication,
    compare_policies,
    default_policies,
    evaluate_adapter,
    publication_record,
    publish_adapter,
    record_publish_decision,
    stage_policies,
)
from flows.stages.ingest import assemble_pending, pull_langfuse_stage, retention_stage
from flows.stages.pipeline_run import (
    begin_pipeline_run,
    fail_pipeline_run,
    finish_pipeline_run,
    learning_selections,
    mark_data_seen,
    nothing_to_learn,
    origin_of,
    record_learned_from,
    refuse_pipeline_run,
    scenarios_to_learn,
    sft_selections,
)
from flows.stages.replay import (
    PolicyReplay,
    ReplaySections,
    RoundSummary,
    ScenarioCounts,
    make_scenarios,
    merge_shards,
    replay_round,
    sample_round,
)
from flows.stages.report import PipelineReport, write_pipeline_report
from flows.stages.score import (
    RoundScores,
    finish_scoring,
    merge_score_rows,
    rewards_to_score,
    score_reward,
    score_round,
    shard_groups,
    training_reward_needs_expected,
)
from flows.stages.train import grpo_stage, sft_stage

__all__ = [
    "PipelineReport",
    "PolicyReplay",
    "Publication",
    "ReplaySections",
    "RoundScores",
    "RoundSummary",
    "ScenarioCounts",
    "StageError",
    "assemble_pending",
    "base_model",
    "begin_pipeline_run",
    "compare_policies",
    "default_policies",
    "evaluate_adapter",
    "fail_pipeline_run",
    "finish_pipeline_run",
    "finish_scoring",
    "grpo_stage",
    "lake_of",
    "learning_selections",
    "loadable_base_model",
    "make_scenarios",
    "mark_data_seen",
    "merge_score_rows",
    "merge_shards",
    "nothing_to_learn",
    "origin_of",
    "publication_record",
    "publish_adapter",
    "pull_langfuse_stage",
    "record_learned_from",
    "record_publish_decision",
    "refuse_pipeline_run",
    "replay_round",
    "retention_stage",
    "rewards_to_score",
    "run_dir",
    "sample_round",
    "scenarios_to_learn",
    "score_reward",
    "score_round",
    "sft_selections",
    "sft_stage",
    "shard_groups",
    "stage_policies",
    "training_reward_needs_expected",
    "work_dir",
    "write_pipeline_report",
]
