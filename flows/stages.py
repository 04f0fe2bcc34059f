"""Stage functions: one per step of the loop, each turning the configuration into library calls.

These are what the Prefect tasks run (`flows.prefect_flows`) and what tests call
directly. Each takes the validated `TrajlakeConfig`, does its I/O through the lake, and
returns a small JSON-able dict (Prefect stores task results; artifacts are built from
them). The work itself lives in `ingest`, `training` and `judging`; nothing here
transforms data.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import store
from flows.config import TrajlakeConfig


class StageError(ValueError):
    """A stage cannot run with this configuration or lake state; names the key or table at fault."""

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        super().__init__(f"`{key}`: {detail}")


# --- shared resolution --------------------------------------------------------------------


def lake_of(config: TrajlakeConfig) -> store.Lake:
    return store.Lake(config.lake.path)


def base_model(config: TrajlakeConfig) -> str:
    """The configured base model, or the tiny local model (built once, cached) when none is set."""
    if config.replay.model:
        return config.replay.model
    from training.tiny import tiny_model_path

    return str(tiny_model_path())


def work_dir(config: TrajlakeConfig, *parts: str) -> Path:
    """Checkpoints and adapters in training: `train.output_dir`, else `<lake>/_work` (kept out of table globs)."""
    lake = lake_of(config)
    if config.train.output_dir:
        root = Path(config.train.output_dir)
    elif lake.is_local:
        root = Path(lake.root) / "_work"
    else:
        raise StageError(
            "train.output_dir", f"the lake `{lake.root}` is remote: set a local folder for checkpoints"
        )
    return root.joinpath(*parts)


def _quoted(ids: list[str]) -> str:
    return ", ".join("'" + i.replace("'", "''") + "'" for i in ids)


def programmatic_reward(config: TrajlakeConfig) -> Any:
    """The reward the evaluation gate scores val replays with: the one named `score.reward`, else the first.

    `score.reward` is a reward *name* (`exact_match`, or `calculator` for
    `flows.demo.task:calculator_reward`); RULER and `combined` need a judge or other rows,
    so the gate falls back to the first programmatic reward for them.
    """
    from judging.registry import get_reward

    rewards = [get_reward(spec) for spec in config.score.rewards]
    for reward in rewards:
        if reward.name == config.score.reward:
            return reward
    if rewards:
        return rewards[0]
    raise StageError(
        "score.rewards", "evaluation needs at least one programmatic reward (e.g. `exact_match`)"
    )


# --- ingest ---------------------------------------------------------------------------------


def collector_app(lake: str | os.PathLike[str], **overrides: Any) -> tuple[Any, Any]:
    """A `trajlake collect` ASGI app and its `Collector`, tuned to flush and assemble quickly."""
    from ingest.collector import Collector, create_app
    from ingest.config import CollectorConfig

    settings = {"flush_seconds": 0.5, "idle_timeout_s": 2.0, "assemble_interval_s": 0.5, **overrides}
    config = CollectorConfig(lake=str(lake), **settings)
    collector = Collector(config)
    return create_app(config, collector), collector


def finish_collection(collector: Any) -> dict[str, int]:
    """Flush what the collector spooled and assemble every pending trace; returns its counters."""
    collector.flush()
    collector.assemble_ready(everything=True)
    stats = collector.stats
    return {
        "spans": stats.rows_flushed,
        "trajectories": stats.trajectories_written,
        "requests": stats.requests,
    }


def instrument_agent(endpoint: str, service_name: str) -> tuple[Any, Any, Any]:
    """Tracing and event logging of an agent to a collector: (tracer provider, logger provider, uninstrument)."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    import ingest

    provider = ingest.instrument(endpoint=endpoint, service_name=service_name, set_global=False)
    logger_provider = LoggerProvider(resource=Resource.create({"service.name": service_name}))
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs"))
    )

    def uninstrument() -> None:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().uninstrument()

    return provider, logger_provider, uninstrument


def pull_langfuse(config: TrajlakeConfig) -> int:
    """Pull what is new in the configured Langfuse project; returns trajectories written."""
    from ingest.langfuse.config import LangfuseConfig, PullFilters
    from ingest.langfuse.pull import pull_langfuse as pull

    section = config.langfuse
    public, secret = os.environ.get(section.public_key_env), os.environ.get(section.secret_key_env)
    if not public or not secret:
        raise StageError(
            "langfuse.public_key_env", f"set ${section.public_key_env} and ${section.secret_key_env}"
        )
    langfuse = LangfuseConfig(
        host=section.host,
        public_key=public,
        secret_key=secret,
        overlap=timedelta(minutes=section.overlap_minutes),
    )
    filters = PullFilters(environments=(section.environment,) if section.environment else ())
    return pull(lake_of(config), langfuse, filters).trajectories


def pending_trace_ids(lake: store.Lake) -> list[str]:
    """Traces with spans newer than their trajectory (or none yet): what assembly has to (re)do."""
    if not lake.data_files("spans"):
        return []
    con = store.connect(lake)
    rows = con.execute(
        """
        SELECT s.trace_id FROM spans s
        LEFT JOIN (SELECT trace_id, max(_written_at) AS assembled_at FROM trajectories
                   WHERE source IN ('otel', 'langfuse') GROUP BY trace_id) t USING (trace_id)
        GROUP BY s.trace_id, t.assembled_at
        HAVING t.assembled_at IS NULL OR max(s._written_at) > t.assembled_at
        ORDER BY s.trace_id
        """
    ).fetchall()
    return [r[0] for r in rows]


def assemble_pending(config: TrajlakeConfig) -> int:
    """Assemble traces whose spans arrived after their last assembly; returns trajectories written."""
    from ingest import rebuild

    lake = lake_of(config)
    trace_ids = pending_trace_ids(lake)
    if not trace_ids:
        return 0
    return rebuild(lake, trace_ids=trace_ids).trajectories


# --- scenarios and replay -----------------------------------------------------------------------


def make_scenarios(config: TrajlakeConfig) -> dict[str, int]:
    """Scenarios from the trajectories `scenarios.sql` selects (idempotent: same ids, same split)."""
    from training.replay.scenario_io import create_scenarios
    from training.replay.scenarios import ScenarioConfig

    result = create_scenarios(
        lake_of(config), config.scenarios.sql, ScenarioConfig(val_fraction=config.scenarios.val_fraction)
    )
    con = store.connect(lake_of(config))
    counts = dict(con.execute("SELECT split, count(*) FROM scenarios GROUP BY split").fetchall())
    if not counts.get("train"):
        raise StageError(
            "scenarios.sql",
            f"no train scenarios in the lake ({len(result.skipped)} trajectories skipped"
            + (f", e.g. `{result.skipped[0][0]}`: {result.skipped[0][1]}" if result.skipped else "")
            + "); check the selection and that production trajectories have content",
        )
    return {"train": counts.get("train", 0), "val": counts.get("val", 0), "skipped": len(result.skipped)}


def tool_source(config: TrajlakeConfig) -> Any:
    """Tools for rollouts: recorded production results and/or `package.module:function` callables."""
    from training.replay.rollout.tools import make_tools

    specs = [s.strip() for s in config.replay.tools.split(",") if s.strip()]
    callables = [s for s in specs if s != "recorded"]
    return make_tools(callables, recorded="recorded" in specs)


def replay_config(config: TrajlakeConfig, run: str, seed: int) -> Any:
    from training.replay.stage import ReplayConfig

    section = config.replay
    return ReplayConfig(
        group_size=section.group_size,
        run=run,
        temperature=section.temperature,
        seed=seed,
        max_turns=section.max_turns,
        max_tokens=section.max_new_tokens,
        concurrency=section.concurrency,
    )


def sampler_for(config: TrajlakeConfig, adapter: str | None) -> Any:
    from training.replay.samplers import make_sampler

    options: dict[str, Any] = {"adapter": adapter}
    if config.replay.backend == "vllm-server":
        options["base_url"] = config.replay.base_url
    return make_sampler(config.replay.backend, base_model(config), **options)


def replay_round(config: TrajlakeConfig, adapter: str | None, round_number: int) -> dict[str, Any]:
    """Group-sample the train scenarios with the current policy; resumable (complete groups are skipped)."""
    from training.replay.stage import replay

    with sampler_for(config, adapter) as sampler:
        result = replay(
            lake_of(config),
            config.replay.scenarios_sql,
            sampler,
            replay_config(config, run=f"round-{round_number}", seed=config.train.seed + round_number),
            tools=tool_source(config),
        )
        policy = sampler.policy
    group_ids = [*result.group_ids, *result.skipped_group_ids]
    if not group_ids:
        failure = f": {result.failed[0][1]}" if result.failed else ""
        raise StageError("replay.scenarios_sql", f"no group was sampled{failure}")
    return {
        "policy": policy,
        "group_ids": group_ids,
        "groups": len(group_ids),
        "trajectories": len(group_ids) * config.replay.group_size,
        "generated_tokens": result.generated_tokens,
        "failed": len(result.failed),
        "seconds": round(result.elapsed_s, 2),
    }


# --- scoring --------------------------------------------------------------------------------------


def rewards_to_score(config: TrajlakeConfig) -> list[str]:
    """Every reward a round is scored with: the programmatic ones, then RULER when a judge is configured."""
    return [*config.score.rewards, *(["ruler"] if config.score.judge.model else [])]


def _replay_where(group_ids: list[str] | None) -> str:
    where = "source = 'replay'"
    if group_ids:
        where += f" AND group_id IN ({_quoted(group_ids)})"
    return where


def score_reward(config: TrajlakeConfig, reward: str, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Score the replayed trajectories (of `group_ids`) with one reward; skips what that scorer already scored."""
    from judging.config import JudgeConfig, ScoreConfig
    from judging.stage import score

    judge_config = None
    if reward == "ruler":
        judge = config.score.judge
        judge_config = JudgeConfig(
            model=judge.model,
            base_url=judge.base_url,
            api_key=os.environ.get(judge.api_key_env) or "none",
            concurrency=judge.concurrency,
            rubric=Path(judge.rubric_file).read_text() if judge.rubric_file else None,
        )
    summary = score(
        lake_of(config),
        reward,
        ScoreConfig(where=_replay_where(group_ids), progress=False),
        judge=judge_config,
    )
    return _score_row(summary)


def finish_scoring(config: TrajlakeConfig, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Write the combined reward (when weights are configured); stats of the reward training uses."""
    from judging.combine import combine

    lake = lake_of(config)
    if config.score.weights:
        combine(lake, config.score.weights, "combined", where=_replay_where(group_ids))
    return group_stats(lake, config.score.reward, group_ids)


def score_round(config: TrajlakeConfig, group_ids: list[str] | None = None) -> dict[str, Any]:
    """Every configured reward, one after the other, then the training reward's stats (the flow runs
    the rewards as concurrent tasks instead)."""
    table = [score_reward(config, reward, group_ids) for reward in rewards_to_score(config)]
    return {**finish_scoring(config, group_ids), "table": table}


def _score_row(summary: Any) -> dict[str, Any]:
    return {
        "reward": summary.reward,
        "scorer": summary.scorer,
        "groups_scored": summary.groups_scored,
        "groups_skipped": summary.groups_skipped,
        "groups_failed": summary.groups_failed,
        "trajectories_scored": summary.trajectories_scored,
    }


def group_stats(lake: store.Lake, reward: str, group_ids: list[str] | None) -> dict[str, Any]:
    """Mean, spread and equal-reward groups of `reward` over the given groups (all replay groups if None)."""
    con = store.connect(lake)
    where = f"AND g.group_id IN ({_quoted(group_ids)})" if group_ids else ""
    row = con.execute(
        f"""
        SELECT avg(r.value), coalesce(stddev_pop(r.value), 0), count(*),
               (SELECT count(*) FROM groups g WHERE g.name = ? AND g.all_equal {where})
        FROM trajectories g JOIN latest_rewards r USING (trajectory_id)
        WHERE r.name = ? AND g.source = 'replay' {where}
        """,
        [reward, reward],
    ).fetchone()
    mean, std, n, equal = row
    return {
        "mean": float(mean or 0.0),
        "std": float(std or 0.0),
        "scored": int(n),
        "equal_groups": int(equal),
    }


# --- training -----------------------------------------------------------------------------------


def train_sft(config: TrajlakeConfig, round_number: int = 0) -> str:
    """SFT a LoRA adapter on the production trajectories `train.sft.sql` selects; returns its folder."""
    from training.sft import train_sft as sft
    from training.sft_config import TrajlakeSFTConfig

    section = config.train.sft
    output = work_dir(config, f"sft-{round_number}")
    sft_config = TrajlakeSFTConfig(
        output_dir=str(output),
        num_train_epochs=section.epochs,
        learning_rate=section.learning_rate,
        per_device_train_batch_size=section.batch_size,
        lora_r=section.lora_r,
        max_length=section.max_length,
        seed=config.train.seed,
        gradient_checkpointing=config.train.gradient_checkpointing,
        report_to="none",
    )
    result = sft(lake_of(config), section.sql, base_model(config), output, sft_config, resume=True)
    return result.adapter_dir


def train_grpo(
    config: TrajlakeConfig, adapter: str | None, round_number: int, group_ids: list[str] | None = None
) -> str:
    """GRPO on the stored, scored groups of this round (all replayed groups if none given); returns the adapter."""
    from training.grpo import train_grpo as grpo
    from training.grpo_config import TrajlakeGRPOConfig

    section = config.train.grpo
    sql = "SELECT trajectory_id FROM trajectories WHERE source = 'replay' AND len(turns) > 0"
    if group_ids:
        sql += f" AND group_id IN ({_quoted(group_ids)})"
    output = work_dir(config, f"grpo-{round_number}")
    grpo_config = TrajlakeGRPOConfig(
        output_dir=str(output),
        loss_type=section.loss_type,
        beta=section.beta,
        learning_rate=section.learning_rate,
        num_train_epochs=section.epochs,
        per_device_train_batch_size=section.batch_size,
        scale_rewards=section.scale_rewards,
        temperature=config.replay.temperature,
        reward_name=config.score.reward,
        lora_r=config.train.sft.lora_r,
        seed=config.train.seed,
        gradient_checkpointing=config.train.gradient_checkpointing,
        report_to="none",
    )
    result = grpo(lake_of(config), sql, base_model(config), adapter, output, grpo_config, resume=True)
    return result.adapter_dir


# --- evaluation and publishing ----------------------------------------------------------------------


def _evaluator(config: TrajlakeConfig) -> Any:
    from training.evaluation import replay_evaluator

    return replay_evaluator(
        lake_of(config),
        base_model(config),
        programmatic_reward(config),
        replay_config=replay_config(config, run="eval", seed=0),
        backend=config.replay.backend,
    )


def evaluate_adapter(config: TrajlakeConfig, adapter: str) -> dict[str, Any]:
    """Val reward of `adapter` and of the production adapter (or the base model when none is published)."""
    from training.errors import AdapterNotFound
    from training.publish import resolve_adapter

    if not adapter:
        raise StageError("adapter", "no adapter to evaluate: train one first (`trajlake train sft|grpo`)")
    lake = lake_of(config)
    try:
        incumbent = resolve_adapter(lake, f"{config.publish.name}:production")
    except AdapterNotFound:
        incumbent = None
    evaluate = _evaluator(config)
    con = store.connect(lake)
    scenarios = con.execute("SELECT count(*) FROM scenarios WHERE split = 'val'").fetchone()[0]
    return {
        "candidate": adapter,
        "candidate_reward": float(evaluate(adapter)),
        "baseline": f"{incumbent['name']}:{incumbent['version']}" if incumbent else "base model",
        "baseline_reward": float(evaluate(incumbent["path"] if incumbent else None)),
        "scenarios": int(scenarios),
        "reward": programmatic_reward(config).name,
    }


def publish_adapter(
    config: TrajlakeConfig, adapter: str, evaluation: dict[str, Any], force: bool = False
) -> dict[str, Any]:
    """Publish `adapter`: promoted to `production` when it beats the baseline (or forced), else only `latest`."""
    from training.errors import PromotionRefused
    from training.publish import publish

    lake = lake_of(config)
    section = config.publish
    common = {
        "registry": section.registry or None,
        "base_model": base_model(config),
        "load_into": section.load_into or None,
    }
    gate_needed = section.require_improvement and not force
    try:
        published = publish(
            lake,
            adapter,
            section.name,
            aliases=("latest", "production"),
            evaluator=_evaluator(config) if gate_needed else None,
            force=force,
            **common,
        )
        promoted = True
    except PromotionRefused:
        published = publish(lake, adapter, section.name, aliases=("latest",), **common)
        promoted = False

    return {
        "name": published.name,
        "version": published.version,
        "path": published.path,
        "aliases": published.aliases,
        "promoted": promoted,
        "candidate_reward": evaluation.get("candidate_reward"),
        "baseline_reward": evaluation.get("baseline_reward"),
        "lineage_json": json.dumps(published.manifest.get("lineage", {}), indent=1, default=str)[:20000],
    }
