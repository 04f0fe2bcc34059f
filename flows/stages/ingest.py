"""Ingest stages: pull from Langfuse, assemble what arrived since the last assembly."""

from __future__ import annotations

from flows.config.root import LangfuseSection
from flows.stages.common import StageError
from store.erasure.retention import RetentionConfig
from store.lake import Lake


def pull_langfuse_stage(lake: Lake, langfuse: LangfuseSection) -> int:
    """Pull what is new in the Langfuse project `[langfuse]` names; returns trajectories written."""
    from ingest.langfuse.errors import InvalidLangfuseConfig
    from ingest.langfuse.pull import pull_langfuse

    if not langfuse.public_key or not langfuse.secret_key:
        raise StageError("langfuse.public_key_env", "set $LANGFUSE_PUBLIC_KEY and $LANGFUSE_SECRET_KEY")
    try:
        return pull_langfuse(lake, langfuse, langfuse.filters).trajectories
    except InvalidLangfuseConfig as exc:
        raise StageError(f"langfuse.{exc.field}", str(exc)) from None


def assemble_pending(lake: Lake) -> int:
    """Assemble traces whose spans arrived after their last assembly; returns trajectories written."""
    from ingest.lakeio import assemble_traces, pending_trace_ids

    return assemble_traces(lake, pending_trace_ids(lake)).trajectories


def retention_stage(lake: Lake, retention: RetentionConfig) -> int:
    """Erase production data past `[retention] production_days` (as `trajlake forget` does);
    returns the trajectories erased."""
    from flows.stages.forget import apply_retention

    report = apply_retention(lake, retention)
    return 0 if report is None else sum(t.rows_deleted for t in report.tables if t.table == "trajectories")
