"""Configuration of the Langfuse puller: where and how politely to talk, what to pull.

`LangfuseConfig` says how to reach the server and how to behave (page sizes, retries,
overlap window, score mapping); `PullFilters` says which traces a pull covers. Library
code never reads env vars: the CLI reads `LANGFUSE_PUBLIC_KEY` / `LANGFUSE_SECRET_KEY`
and passes them here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ingest.langfuse.errors import InvalidLangfuseConfig
from ingest.scores import DEFAULT_CATEGORY_VALUES

# API limits, from the endpoint docs in the langfuse 5.0.4 SDK (`api/observations/raw_client.py`,
# `api/scores/raw_client.py`): larger limits answer HTTP 400.
MAX_OBSERVATIONS_PAGE = 1000
MAX_SCORES_PAGE = 100

# Every field group except `metadata` truncation control: we need io for messages, model and
# usage for the trajectory columns, trace_context for trace name/tags/release.
OBSERVATION_FIELDS = "core,basic,time,io,metadata,model,usage,prompt,metrics,trace_context"
SCORE_FIELDS = "details,subject"


@dataclass
class LangfuseConfig:
    """How to reach a Langfuse server and how to pull from it."""

    # --- connection --------------------------------------------------------------------
    host: str = field(
        default="https://cloud.langfuse.com",
        metadata={"help": "Langfuse web URL (without /api/public)."},
    )
    public_key: str | None = field(
        default=None, metadata={"help": "Project public key (pk-lf-...).", "env": "LANGFUSE_PUBLIC_KEY"}
    )
    secret_key: str | None = field(
        default=None, metadata={"help": "Project secret key (sk-lf-...).", "env": "LANGFUSE_SECRET_KEY"}
    )
    timeout_s: float = field(default=60.0, metadata={"help": "Per-request timeout in seconds."})

    # --- politeness ----------------------------------------------------------------------
    observations_page_size: int = field(
        default=500, metadata={"help": f"Observations per page (1..{MAX_OBSERVATIONS_PAGE})."}
    )
    scores_page_size: int = field(default=100, metadata={"help": f"Scores per page (1..{MAX_SCORES_PAGE})."})
    max_retries: int = field(
        default=6, metadata={"help": "Retries of one request on 429, 5xx or a dropped connection."}
    )
    backoff_base_s: float = field(
        default=1.0, metadata={"help": "First backoff delay; doubles per retry (with jitter)."}
    )
    backoff_max_s: float = field(
        default=60.0, metadata={"help": "Longest single wait, also the cap on a server's Retry-After."}
    )

    # --- incremental pulls -----------------------------------------------------------------
    overlap_minutes: float = field(
        default=30.0,
        metadata={
            "help": "Each run re-reads this many minutes before the watermark, to catch observations that "
            "reached Langfuse late for older traces (rows are deduplicated by key)."
        },
    )
    checkpoint_pages: int = field(
        default=10,
        metadata={"help": "Pages between checkpoints (spans+trajectories written, cursor saved)."},
    )
    expand_metadata: tuple[str, ...] = field(
        default=(), metadata={"help": "Metadata keys to fetch untruncated (others cut at 200 chars)."}
    )
    scores: bool = field(default=True, metadata={"help": "Also pull scores into `rewards`."})
    category_values: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_CATEGORY_VALUES),
        metadata={"help": "Categorical score label -> reward value (case-insensitive)."},
    )

    def __post_init__(self) -> None:
        self.host = self.host.strip().rstrip("/")
        if self.host.endswith("/api/public"):
            self.host = self.host[: -len("/api/public")]
        if not self.host.startswith(("http://", "https://")):
            raise InvalidLangfuseConfig("host", self.host, "must start with http:// or https://")
        if not 1 <= self.observations_page_size <= MAX_OBSERVATIONS_PAGE:
            raise InvalidLangfuseConfig(
                "observations_page_size",
                self.observations_page_size,
                f"the API allows 1..{MAX_OBSERVATIONS_PAGE}",
            )
        if not 1 <= self.scores_page_size <= MAX_SCORES_PAGE:
            raise InvalidLangfuseConfig(
                "scores_page_size", self.scores_page_size, f"the API allows 1..{MAX_SCORES_PAGE}"
            )
        if self.max_retries < 0:
            raise InvalidLangfuseConfig("max_retries", self.max_retries, "must be >= 0")
        if self.overlap_minutes < 0:
            raise InvalidLangfuseConfig("overlap_minutes", self.overlap_minutes, "must not be negative")
        if self.checkpoint_pages < 1:
            raise InvalidLangfuseConfig("checkpoint_pages", self.checkpoint_pages, "must be >= 1")
        self.category_values = {k.strip().lower(): float(v) for k, v in self.category_values.items()}

    @property
    def overlap(self) -> timedelta:
        return timedelta(minutes=self.overlap_minutes)


@dataclass(frozen=True)
class PullFilters:
    """Which traces a pull covers. Empty filters mean everything in the project.

    Each distinct set of filters (with the host) has its own watermark, so a filtered pull
    and an unfiltered one never advance each other's progress.
    """

    since: datetime | None = field(default=None, metadata={"help": "Observations starting at/after this."})
    until: datetime | None = field(default=None, metadata={"help": "Observations starting before this."})
    environments: tuple[str, ...] = field(default=(), metadata={"help": "Any of these environments."})
    trace_name: str | None = field(default=None, metadata={"help": "Only traces with this name."})
    tags: tuple[str, ...] = field(default=(), metadata={"help": "Traces carrying any of these tags."})
    user_id: str | None = field(default=None, metadata={"help": "Only this user's traces."})
    session_id: str | None = field(default=None, metadata={"help": "Only this session's traces."})

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))
        if self.since and self.until and self.since >= self.until:
            raise InvalidLangfuseConfig(
                "until", self.until, f"must be after `since` ({self.since.isoformat()})"
            )

    @property
    def narrows_traces(self) -> bool:
        """Whether the filters select traces by something the scores API cannot filter on
        (its `sessionId` selects session-level scores, not the scores of a session's traces)."""
        return bool(self.trace_name or self.tags or self.user_id or self.session_id)

    def describe(self) -> dict[str, object]:
        """The filters as plain JSON values (empty ones left out)."""
        out: dict[str, object] = {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "environments": sorted(self.environments) or None,
            "trace_name": self.trace_name,
            "tags": sorted(self.tags) or None,
            "user_id": self.user_id,
            "session_id": self.session_id,
        }
        return {k: v for k, v in out.items() if v is not None}


def scope_of(host: str, filters: PullFilters) -> str:
    """The watermark scope of a pull: host plus a digest of the filters (readable, stable).

    >>> scope_of("https://cloud.langfuse.com", PullFilters())
    'https://cloud.langfuse.com#all'
    """
    described = filters.describe()
    if not described:
        return f"{host}#all"
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]
    return f"{host}#{digest}"
