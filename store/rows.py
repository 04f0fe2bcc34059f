"""Small helpers every writer of the lake uses: the time type of the timestamp columns, run ids,
rows of the `runs` table, the model name a served adapter version answers to."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from store.metrics import split_metrics


def new_run_id(stage: str) -> str:
    """A fresh run id (a key of the `runs` table), sortable by start time: `<stage>-<UTC time>-<random>`."""
    return f"{stage}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def runs_row(run_id: str, step: int, stage: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """One `runs` row: the numbers in `scalars` and the text in `tags` (what trajlake reads:
    `store.metrics`); `metrics` holds, as JSON text, only what has no typed column (null and
    nested values), and is null when there is none.

    >>> row = runs_row("r1", 3, "grpo", {"loss": float("nan"), "role": "x", "sizes": [1, 2]})
    >>> row["scalars"], row["tags"], row["metrics"]
    ({'loss': nan}, {'role': 'x'}, '{"sizes": [1, 2]}')
    >>> runs_row("r1", 4, "grpo", {"loss": 0.5})["metrics"] is None
    True
    """
    scalars, tags = split_metrics(metrics)
    rest = {k: v for k, v in metrics.items() if k not in scalars and k not in tags}
    return {
        "run_id": run_id,
        "step": step,
        "stage": stage,
        "metrics": json.dumps(rest) if rest else None,
        "scalars": scalars,
        "tags": tags,
        "at": utc_now(),
    }


def utc_now() -> datetime:
    """Timezone-aware now, the type every timestamp column expects."""
    return datetime.now(UTC)


def served_adapter_name(name: str, version: int) -> str:
    """The model name a published adapter version is served under: `<name>-v<version>`.

    `trajlake publish --load-into` registers it with vLLM and `trajlake serve-sampler`
    answers with it, so production traces record it as their model (and `policy`), and the
    `policy_performance` view attributes them to that `adapters` row.

    >>> served_adapter_name("calculator-agent", 3)
    'calculator-agent-v3'
    """
    return f"{name}-v{version}"
