"""`trajlake.toml`: one validated configuration for every stage, with environment overrides.

The file has one table per stage; every key has a default, so an empty file is a valid
configuration (the embedded default the demo uses). Validation happens before any
work: an unknown key, a wrong type or an out-of-range value is a `ConfigError` naming
the key (`replay.group_size`), what was given, and what is allowed.

Environment overrides use `TRAJLAKE_<SECTION>__<KEY>` (double underscore between
levels), e.g. `TRAJLAKE_REPLAY__GROUP_SIZE=8` or `TRAJLAKE_TRAIN__GRPO__BETA=0.04`;
values are parsed as TOML values when they parse (`8`, `true`, `["a", "b"]`) and taken as
strings otherwise. Only this module and the CLI read the environment; library code gets
explicit objects.
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

ENV_PREFIX = "TRAJLAKE_"
DEFAULT_CONFIG_FILE = "trajlake.toml"


class ConfigError(ValueError):
    """A configuration key is unknown, mistyped or out of range. Nothing has run."""

    def __init__(self, key: str, detail: str, source: str) -> None:
        self.key = key
        self.source = source
        super().__init__(f"bad configuration `{key}` ({source}): {detail}")


def _help(text: str, default: Any = MISSING, factory: Any = MISSING) -> Any:
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"help": text})
    return field(default=default, metadata={"help": text})


# --- sections --------------------------------------------------------------------------


@dataclass
class LakeSection:
    path: str = _help("Lake directory or object-store URL.", "./lake")


@dataclass
class CollectorSection:
    host: str = _help("Interface `trajlake collect` binds to.", "127.0.0.1")
    port: int = _help("OTLP/HTTP port.", 4318)
    token_env: str = _help("Env var holding a bearer token clients must send (empty: no auth).", "")
    max_body_mb: int = _help("Largest accepted request body, also after decompression (MiB).", 64)
    flush_seconds: float = _help("Seal spooled spans into Parquet after this many seconds.", 5.0)
    idle_timeout: float = _help(
        "Assemble a trace whose root span never arrives after this many quiet seconds.", 30.0
    )
    redact_emails: bool = _help(
        "Replace email addresses before storing (secrets are always redacted).", False
    )
    redact_phones: bool = _help("Replace phone numbers before storing.", False)
    redact_function: str = _help("Your own redaction, `package.module:function` (string -> string).", "")


@dataclass
class LangfuseSection:
    host: str = _help("Langfuse base URL; empty disables the Langfuse pull.", "")
    public_key_env: str = _help("Env var with the Langfuse public key.", "LANGFUSE_PUBLIC_KEY")
    secret_key_env: str = _help("Env var with the Langfuse secret key.", "LANGFUSE_SECRET_KEY")
    environment: str = _help("Only pull this Langfuse environment (empty: all).", "")
    overlap_minutes: int = _help("Re-read window for observations that arrive late.", 60)


@dataclass
class ScenariosSection:
    sql: str = _help(
        "SELECT returning `trajectory_id`s whose prompt prefixes become scenarios.",
        "SELECT trajectory_id FROM trajectories WHERE source IN ('otel', 'langfuse', 'import')",
    )
    val_fraction: float = _help("Share of scenarios held out for evaluation (by hash, stable).", 0.2)


@dataclass
class ReplaySection:
    backend: Literal["transformers", "vllm", "vllm-server"] = _help("Sampler backend.", "transformers")
    model: str = _help("Base model name or path; empty means the tiny local model.", "")
    base_url: str = _help("vLLM server URL for backend `vllm-server`.", "http://127.0.0.1:8000")
    group_size: int = _help("Trajectories sampled per scenario (GRPO group).", 4)
    temperature: float = _help("Sampling temperature.", 1.0)
    max_new_tokens: int = _help("Token limit per model turn.", 96)
    max_turns: int = _help("Model turns per rollout.", 4)
    tools: str = _help(
        "`recorded` (production tool results) or `package.module:function` callables, comma separated.",
        "recorded",
    )
    scenarios_sql: str = _help("Which scenarios to replay.", "SELECT * FROM scenarios WHERE split = 'train'")
    concurrency: int = _help("Scenarios sampled concurrently.", 4)


@dataclass
class JudgeSection:
    model: str = _help("Judge model for RULER; empty disables RULER.", "")
    base_url: str = _help("OpenAI-compatible endpoint of the judge.", "")
    api_key_env: str = _help("Env var holding the judge API key.", "OPENAI_API_KEY")
    concurrency: int = _help("Judge calls in flight.", 8)
    rubric_file: str = _help("Custom rubric (markdown); empty: the default RULER rubric.", "")


@dataclass
class ScoreSection:
    rewards: list[str] = _help(
        "Programmatic rewards: built-in names or `package.module:function`.", factory=lambda: ["exact_match"]
    )
    reward: str = _help("The reward name training uses (a single reward or `combined`).", "exact_match")
    weights: dict[str, float] = _help("Weights of named rewards combined into `combined`.", factory=dict)
    judge: JudgeSection = field(default_factory=JudgeSection)


@dataclass
class SFTSection:
    enabled: bool = _help("Run SFT before GRPO.", True)
    sql: str = _help(
        "SELECT of trajectories to imitate.",
        "SELECT trajectory_id FROM trajectories WHERE source IN ('otel', 'langfuse', 'import') AND has_content",
    )
    epochs: float = _help("Passes over the SFT data.", 3.0)
    learning_rate: float = _help("SFT learning rate.", 2e-3)
    batch_size: int = _help("Per-device batch size.", 8)
    lora_r: int = _help("LoRA rank (vLLM accepts 8, 16, 32, 64, ...).", 16)
    max_length: int = _help("Longest tokenized conversation.", 512)


@dataclass
class GRPOSection:
    enabled: bool = _help("Run GRPO on replayed, scored groups.", True)
    loss_type: str = _help("TRL loss type: dapo, grpo, dr_grpo, cispo, ...", "dapo")
    beta: float = _help("KL coefficient to the base model (0 disables the reference pass).", 0.0)
    learning_rate: float = _help("GRPO learning rate.", 1e-3)
    epochs: float = _help("Passes over the stored groups per round.", 2.0)
    batch_size: int = _help("Per-device batch size (trajectories).", 8)
    scale_rewards: Literal["group", "batch", "none"] = _help("Advantage normalisation.", "group")


@dataclass
class TrainSection:
    output_dir: str = _help("Where checkpoints go (default: <lake>/_work/train).", "")
    seed: int = _help("Training seed.", 0)
    gradient_checkpointing: bool = _help(
        "Recompute activations to save memory (TRL's default; off for tiny CPU models).", True
    )
    sft: SFTSection = field(default_factory=SFTSection)
    grpo: GRPOSection = field(default_factory=GRPOSection)


@dataclass
class PublishSection:
    name: str = _help("Adapter name in the registry.", "agent")
    registry: str = _help("Registry path or URL (default: <lake>/_registry).", "")
    require_improvement: bool = _help("Refuse to promote an adapter whose val reward is not better.", True)
    load_into: str = _help("vLLM server URL to hot-load the published adapter into (empty: none).", "")


@dataclass
class PipelineSection:
    rounds: int = _help("Replay -> score -> GRPO rounds per pipeline run.", 1)
    task_runner: Literal["threads", "dask", "ray"] = _help("Prefect task runner.", "threads")
    max_workers: int = _help("Threads for the thread-pool task runner.", 4)


@dataclass
class SchedulesSection:
    ingest: str = _help("Cron of the ingest deployment.", "0 * * * *")
    pipeline: str = _help("Cron of the nightly pipeline deployment.", "0 3 * * *")
    timezone: str = _help("Time zone of the crons.", "UTC")


@dataclass
class TrajlakeConfig:
    """Everything trajlake runs with; `load_config` builds it from TOML and the environment."""

    lake: LakeSection = field(default_factory=LakeSection)
    collector: CollectorSection = field(default_factory=CollectorSection)
    langfuse: LangfuseSection = field(default_factory=LangfuseSection)
    scenarios: ScenariosSection = field(default_factory=ScenariosSection)
    replay: ReplaySection = field(default_factory=ReplaySection)
    score: ScoreSection = field(default_factory=ScoreSection)
    train: TrainSection = field(default_factory=TrainSection)
    publish: PublishSection = field(default_factory=PublishSection)
    pipeline: PipelineSection = field(default_factory=PipelineSection)
    schedules: SchedulesSection = field(default_factory=SchedulesSection)


# --- building and validating ------------------------------------------------------------


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, tp: Any, value: Any, source: str) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(key, f"got {value!r}; allowed: {_type_name(tp)}", source)
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is list:
        (item,) = get_args(tp)
        if isinstance(value, list):
            return [_coerce(f"{key}[{i}]", item, v, source) for i, v in enumerate(value)]
    elif origin is dict:
        _, item = get_args(tp)
        if isinstance(value, Mapping):
            return {str(k): _coerce(f"{key}.{k}", item, v, source) for k, v in value.items()}
    elif origin in (typing.Union, types.UnionType):
        return value
    raise ConfigError(key, f"expected {_type_name(tp)}, got {value!r} ({type(value).__name__})", source)


def _build(cls: type, data: Mapping[str, Any], prefix: str, source: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = [k for k in data if k not in known]
    if unknown:
        key = f"{prefix}{unknown[0]}"
        raise ConfigError(
            key, f"unknown key; `{prefix.rstrip('.') or 'top level'}` has: {', '.join(known)}", source
        )
    values = {}
    for name, value in data.items():
        tp = hints[name]
        if is_dataclass(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{prefix}{name}", f"expected a table, got {value!r}", source)
            values[name] = _build(tp, value, f"{prefix}{name}.", source)
        else:
            values[name] = _coerce(f"{prefix}{name}", tp, value, source)
    return cls(**values)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Nested dict of `TRAJLAKE_SECTION__KEY=value` overrides (values parsed as TOML)."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def validate(config: TrajlakeConfig, source: str = "configuration") -> TrajlakeConfig:
    """Range checks that types alone cannot express."""
    checks = [
        ("replay.group_size", config.replay.group_size >= 2, "GRPO needs groups of at least 2"),
        ("replay.max_new_tokens", config.replay.max_new_tokens > 0, "must be positive"),
        ("replay.max_turns", config.replay.max_turns > 0, "must be positive"),
        (
            "replay.temperature",
            config.replay.temperature > 0,
            "must be > 0 (logprobs of greedy decoding are useless to GRPO)",
        ),
        ("scenarios.val_fraction", 0 <= config.scenarios.val_fraction < 1, "must be in [0, 1)"),
        (
            "train.sft.lora_r",
            config.train.sft.lora_r in (1, 8, 16, 32, 64, 128, 256, 320, 512),
            "vLLM accepts 1, 8, 16, 32, 64, 128, 256, 320, 512",
        ),
        ("train.grpo.beta", config.train.grpo.beta >= 0, "must be >= 0"),
        ("train.sft.learning_rate", config.train.sft.learning_rate > 0, "must be > 0"),
        ("train.grpo.learning_rate", config.train.grpo.learning_rate > 0, "must be > 0"),
        ("pipeline.rounds", config.pipeline.rounds >= 1, "must be >= 1"),
        ("collector.port", 0 <= config.collector.port < 65536, "must be a TCP port"),
        ("collector.max_body_mb", config.collector.max_body_mb > 0, "must be positive"),
        ("score.judge.concurrency", config.score.judge.concurrency >= 1, "must be >= 1"),
    ]
    for key, ok, detail in checks:
        if not ok:
            raise ConfigError(key, detail, source)
    if config.score.judge.model and not config.score.judge.base_url:
        raise ConfigError("score.judge.base_url", "a judge model is set but no endpoint to reach it", source)
    for name in config.score.weights:
        if name not in (*config.score.rewards, "ruler"):
            raise ConfigError(
                f"score.weights.{name}",
                f"not a configured reward; rewards: {', '.join(config.score.rewards)}, ruler",
                source,
            )
    return config


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrajlakeConfig:
    """Read `trajlake.toml` (if it exists), apply environment overrides, validate.

    `path=None` uses `$TRAJLAKE_CONFIG`, then `./trajlake.toml` if present, else defaults.
    """
    environ = os.environ if environ is None else environ
    chosen = path or environ.get("TRAJLAKE_CONFIG")
    data: dict[str, Any] = {}
    source = "defaults"
    if chosen is not None or Path(DEFAULT_CONFIG_FILE).exists():
        file = Path(chosen or DEFAULT_CONFIG_FILE)
        source = str(file)
        if not file.exists():
            raise ConfigError("(file)", f"`{file}` does not exist", source)
        try:
            data = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("(syntax)", str(exc), source) from None
    overrides = env_overrides(environ)
    if overrides:
        source = f"{source} + environment"
    config = _build(TrajlakeConfig, _merge(data, overrides), "", source)
    return validate(config, source)


def config_file_present(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a configuration file applies (`$TRAJLAKE_CONFIG`, or `./trajlake.toml`)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("TRAJLAKE_CONFIG")) or Path(DEFAULT_CONFIG_FILE).exists()


def collect_defaults(config: TrajlakeConfig, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults of `trajlake collect`'s options from the `collector` section (explicit flags still win)."""
    environ = os.environ if environ is None else environ
    section = config.collector
    defaults: dict[str, Any] = {
        "host": section.host,
        "port": section.port,
        "max_body_mb": section.max_body_mb,
        "flush_seconds": section.flush_seconds,
        "idle_timeout": section.idle_timeout,
        "redact_emails": section.redact_emails,
        "redact_phones": section.redact_phones,
    }
    if section.redact_function:
        defaults["redact_function"] = section.redact_function
    if section.token_env:
        if not environ.get(section.token_env):
            raise ConfigError("collector.token_env", f"${section.token_env} is not set", "environment")
        defaults["token"] = environ[section.token_env]
    return defaults


def with_lake(config: TrajlakeConfig, lake: str | None) -> TrajlakeConfig:
    """The config with `lake.path` replaced when a `--lake` option was given."""
    return config if not lake else replace(config, lake=LakeSection(path=lake))


def describe(cls: type = TrajlakeConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every key: the configuration reference in the README."""
    rows = []
    instance = cls()
    for f in fields(cls):
        value = getattr(instance, f.name)
        if is_dataclass(value):
            rows.extend(describe(type(value), f"{prefix}{f.name}."))
        else:
            rows.append((f"{prefix}{f.name}", repr(value), f.metadata.get("help", "")))
    return rows
