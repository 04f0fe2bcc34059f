"""Ingest stages: pull from Langfuse, assemble what arrived since the last assembly."""

from __future__ import annotations

from flows.config.root import Settings
from flows.stages.common import StageError, lake_of
from flows.stages.forget import apply_retention as retain
from ingest.lakeio import assemble_traces, pending_trace_ids
from ingest.langfuse.errors import InvalidLangfuseConfig
from ingest.langfuse.pull import pull_langfuse as pull


def pull_langfuse(config: Settings) -> int:
    """Pull what is new in the configured Langfuse project; returns trajectories written."""
    langfuse = config.langfuse
    if not langfuse.public_key or not langfuse.secret_key:
        raise StageError("langfuse.public_key_env", "set $LANGFUSE_PUBLIC_KEY and $LANGFUSE_SECRET_KEY")
    try:
        return pull(lake_of(config), langfuse, config.langfuse.filters).trajectories
    except InvalidLangfuseConfig as exc:
        raise StageError(f"langfuse.{exc.field}", str(exc)) from None


def assemble_pending(config: Settings) -> int:
    """Assemble traces whose spans arrived after their last assembly; returns trajectories written."""
    lake = lake_of(config)
    return assemble_traces(lake, pending_trace_ids(lake)).trajectories


def apply_retention(config: Settings) -> int:
    """Erase production data past `[retention] production_days` (as `trajlake forget` does);
    returns the trajectories erased."""
    report = retain(lake_of(config), config.retention)
    return 0 if report is None else sum(t.rows_deleted for t in report.tables if t.table == "trajectories")
