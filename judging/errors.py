"""Exceptions of the judging package. Context lives in attributes so flows and tests can branch on it.

Two kinds of failure exist here and they are kept apart on purpose:

- errors that stop a run before or while it starts (a bad reward spec, a judge that
  rejects our credentials): raised as a `JudgingError` subclass, nothing is written;
- failures of one group or one trajectory (a judge that keeps answering garbage, a
  reward function that raises): never raised out of `score`, but recorded as
  `status='failed'` rows with a snake_case reason code, so a rerun retries them.
"""

from __future__ import annotations

from store.errors import SettingError


class JudgingError(Exception):
    """Base class for every error raised by `judging`."""


class RewardSpecError(JudgingError, ValueError):
    """A reward named on the command line or in config cannot be resolved to a scorer."""

    def __init__(self, spec: str, detail: str, available: list[str] | None = None) -> None:
        self.spec = spec
        self.available = available or []
        message = f"reward `{spec}`: {detail}"
        if self.available:
            message += f"; built-in rewards: {', '.join(self.available)}"
        super().__init__(message)


class SqlRewardError(JudgingError, ValueError):
    """A SQL reward expression or `--where` filter does not run against the lake's views."""

    def __init__(self, sql: str, detail: str) -> None:
        self.sql = sql
        short = " ".join(sql.split())[:120]
        super().__init__(f"SQL `{short}`: {detail}; nothing was written")


class RewardInputError(JudgingError, ValueError):
    """A built-in reward cannot judge this trajectory (e.g. the scenario has no expected output).

    Raised inside reward functions; the stage records it as a failed row with `reason`.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(detail)


class JudgeCallError(JudgingError):
    """One judge call failed. `reason` is the snake_case code recorded when retries run out."""

    def __init__(
        self, reason: str, detail: str, *, retryable: bool, retry_after: float | None = None
    ) -> None:
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self.detail = detail
        # Filled in by the retry loop when attempts run out: what the failure cost.
        self.attempts = 1
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.retry_reasons: list[str] = []
        super().__init__(f"{reason}: {detail}")


class JudgeConfigError(JudgingError):
    """The judge rejects every call (bad credentials, unknown model): the run stops.

    Scoring every remaining group would only record the same failure over and over, so
    the run stops; rewards already scored stay written, and a rerun resumes from them.
    """

    def __init__(self, model: str, base_url: str | None, status: int | None, detail: str) -> None:
        self.model = model
        self.base_url = base_url
        self.status = status
        where = base_url or "the default OpenAI endpoint"
        super().__init__(
            f"judge `{model}` at {where} rejected the request (HTTP {status}): {detail}. "
            "Check --judge-model, --judge-base-url and the API key; rewards written so far are kept "
            "and a rerun resumes from them."
        )


class ConfigValueError(JudgingError, SettingError):
    """A configuration field holds a value outside what it allows."""

    def __init__(self, message: str, *, field: str, value: object = None) -> None:
        SettingError.__init__(self, message, field=field, value=value)


class JudgeUnreachableError(JudgingError, ConnectionError):
    """Several groups in a row could not reach the judge at all: the endpoint is down, the run stops."""

    def __init__(self, model: str, base_url: str | None, groups: int, detail: str) -> None:
        self.model = model
        self.base_url = base_url
        self.groups = groups
        super().__init__(
            f"judge `{model}` at {base_url or 'the default OpenAI endpoint'} was unreachable for {groups} groups "
            f"in a row ({detail}); stopped. Their failures and every reward scored before are written; "
            "start the judge (or fix --judge-base-url) and rerun: the run resumes where it stopped."
        )
