"""Configuration of the judging stage: `JudgeConfig` for RULER's judge, `ScoreConfig` for a scoring run.

Plain dataclasses with a default and help text on every field; `__post_init__` only
rejects impossible values. Library code never reads the environment: the CLI and the
flows build these objects (the API key is passed in, not looked up here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from judging.errors import ConfigValueError
from store.errors import check_settings

StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]


def _help(text: str, default: Any) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass
class JudgeConfig:
    """How RULER talks to its judge: any OpenAI-compatible chat-completions endpoint."""

    # --- the endpoint ---------------------------------------------------------------------
    model: str = _help(
        "Judge model name, as the endpoint knows it (e.g. `o3`, or a vLLM-served model). No default: "
        "a hosted judge costs money per call, so RULER runs only with a model someone named.",
        "",
    )
    base_url: str | None = _help(
        "OpenAI-compatible base URL (`http://host:8000/v1`); None: api.openai.com.", None
    )
    api_key: str | None = field(
        default=None,
        metadata={
            "help": "API key sent as a bearer token; local servers accept any value.",
            "env": "OPENAI_API_KEY",
        },
    )
    structured_output: StructuredOutput = _help(
        "`json_schema` (strict schema), `json_object`, `none` (prompt + tolerant parser), or `auto`: "
        "try json_schema and fall back to the tolerant parser when the endpoint rejects it.",
        "auto",
    )
    temperature: float | None = _help("Sampling temperature sent to the judge; None: endpoint default.", None)
    max_output_tokens: int | None = _help(
        "`max_tokens` for the judge's answer; None: endpoint default.", None
    )

    # --- the rubric -------------------------------------------------------------------------
    rubric: str | None = _help(
        "Rubric text; None: RULER's default rubric. Its hash is part of `scorer`.", None
    )

    # --- throughput and failure handling ----------------------------------------------------
    concurrency: int = _help(
        "Judge calls in flight at once, per scoring process: N workers send up to N x this (size it to the "
        "endpoint's limit divided by the workers; 429s are retried with backoff either way).",
        8,
    )
    timeout_s: float = _help("Seconds before one judge call counts as timed out (`judge_timeout`).", 120.0)
    max_attempts: int = _help("Attempts per group for 429, 5xx, timeouts and invalid output.", 4)
    backoff_s: float = _help(
        "First retry delay; doubles per attempt with jitter (a 429's Retry-After wins).", 1.0
    )
    max_backoff_s: float = _help("Longest delay between two attempts.", 30.0)

    # --- fitting the judge's context --------------------------------------------------------
    max_context_tokens: int = _help(
        "Judge context window. Prompts are fitted to it by the truncation rule in `judging.ruler.prompt`.",
        128_000,
    )
    chars_per_token: float = _help("Token estimate used for fitting (no tokenizer for hosted judges).", 3.5)
    max_message_chars: int = _help("Any single message longer than this is cut in the middle first.", 8_000)

    # --- bookkeeping ------------------------------------------------------------------------
    seed: int = _help("Base seed of the per-group shuffle; each group's seed is derived and recorded.", 0)
    input_cost_per_mtok: float | None = _help("USD per million prompt tokens, for the recorded cost.", None)
    output_cost_per_mtok: float | None = _help(
        "USD per million completion tokens, for the recorded cost.", None
    )
    use_cache: bool = _help("Reuse cached verdicts for identical (judge, rubric, group) inputs.", True)

    def __post_init__(self) -> None:
        check_settings(
            self,
            (
                "structured_output",
                self.structured_output in ("auto", "json_schema", "json_object", "none"),
                "one of auto, json_schema, json_object, none",
            ),
            *(
                (name, getattr(self, name) >= 1, "a positive integer")
                for name in ("concurrency", "max_attempts", "max_context_tokens", "max_message_chars")
            ),
            ("timeout_s", self.timeout_s > 0, "> 0"),
            ("backoff_s", self.backoff_s >= 0, ">= 0"),
            ("chars_per_token", self.chars_per_token > 0, "> 0"),
            error=ConfigValueError,
        )


@dataclass
class ScoreConfig:
    """One scoring run: which trajectories, where results go, how often they are committed."""

    where: str | None = _help(
        "SQL condition over `trajectories` (plus the scenario's `expected` and `split`) choosing what "
        "to score; default: what the reward can score (exact_match, normalized_match: replays of "
        "scenarios with an expected outcome), `true`: everything. RULER scores whole groups: a group "
        "is judged when any of its trajectories matches.",
        None,
    )
    name: str | None = _help(
        "Reward name to write (default: `ruler`, the built-in's or the function's name).", None
    )
    min_group_size: int = _help("RULER skips groups smaller than this: relative ranking needs two.", 2)
    flush_every: int = _help("Commit reward rows to the lake after this many groups (a kill loses less).", 32)
    flush_interval_s: float = _help("... or after this many seconds, whichever comes first.", 10.0)
    load_turns: bool = _help("Pass token `turns` to reward functions (large; off by default).", False)
    limit_groups: int | None = _help(
        "Score at most this many groups this run (the rest stay for the next).", None
    )
    force: bool = _help("Score again even what the same scorer already scored.", False)
    progress: bool = _help("Show a progress bar on stderr.", True)
    run_id: str | None = _help("Run id recorded on every row; default: a fresh `score-…` id.", None)

    def __post_init__(self) -> None:
        check_settings(
            self,
            ("min_group_size", self.min_group_size >= 1, "1 or more"),
            ("flush_every", self.flush_every >= 1, "1 or more"),
            ("limit_groups", self.limit_groups is None or self.limit_groups >= 0, "0 or more"),
            error=ConfigValueError,
        )
