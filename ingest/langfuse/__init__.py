"""Langfuse as a source: pull traces and scores from a server, or import export files.

>>> from ingest.langfuse import LangfuseConfig, PullFilters, pull_langfuse  # doctest: +SKIP
>>> pull_langfuse("lake", LangfuseConfig(host="https://cloud.langfuse.com",
...               public_key="pk-lf-...", secret_key="sk-lf-..."), PullFilters(environments=("production",)))

Observations become `spans` rows with the Langfuse OTel SDK's attribute names, so the
collector's normaliser and assembler build the trajectories (`source = 'langfuse'`);
scores become `rewards`. Progress lives in the lake's `watermarks` table.
"""

from ingest.langfuse.client import LangfuseClient, retry_after_seconds
from ingest.langfuse.config import LangfuseConfig, PullFilters, scope_of
from ingest.langfuse.errors import (
    ExportNotFound,
    ExportUnreadable,
    InvalidLangfuseConfig,
    LangfuseAuthError,
    LangfuseIngestError,
    LangfuseProtocolError,
    LangfuseRequestRejected,
    LangfuseUnavailable,
    LangfuseUnreachable,
    MalformedExport,
    RecordProblem,
)
from ingest.langfuse.export.importer import ImportReport, import_langfuse_export
from ingest.langfuse.pull import PullReport, pull_langfuse
from ingest.langfuse.spans import observation_to_span, to_span_id, to_trace_id, trace_to_spans
from ingest.langfuse.watermark import PullState, read_state
from ingest.scores import DEFAULT_CATEGORY_VALUES, map_category, score_to_reward

__all__ = [
    "DEFAULT_CATEGORY_VALUES",
    "ExportNotFound",
    "ExportUnreadable",
    "ImportReport",
    "InvalidLangfuseConfig",
    "LangfuseAuthError",
    "LangfuseClient",
    "LangfuseConfig",
    "LangfuseIngestError",
    "LangfuseProtocolError",
    "LangfuseRequestRejected",
    "LangfuseUnavailable",
    "LangfuseUnreachable",
    "MalformedExport",
    "PullFilters",
    "PullReport",
    "PullState",
    "RecordProblem",
    "import_langfuse_export",
    "map_category",
    "observation_to_span",
    "pull_langfuse",
    "read_state",
    "retry_after_seconds",
    "scope_of",
    "score_to_reward",
    "to_span_id",
    "to_trace_id",
    "trace_to_spans",
]
