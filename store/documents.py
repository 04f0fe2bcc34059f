"""JSON documents one package writes into a lake text column and another reads back, declared once.

A replayed trajectory's `metadata` is written by the replay stage (`training.replay.stage`) and
read by GRPO's selection (the temperature the group was sampled at) and by the report (which
replay run made it). Its keys and the SQL that reads them live here, so no JSON path is spelt
outside `store` (`metadata_sql` is the one place).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Keys of a replayed trajectory's `metadata` that other packages read.
REPLAY_RUN = "run"  # the replay run's name (part of the group id); the pipeline's are `round-<n>`
REPLAY_SAMPLING = "sampling"  # a `SamplingRecord`
REPLAY_SPLIT = "split"  # the scenario's split: evaluation replays say `val`


@dataclass(frozen=True)
class SamplingRecord:
    """How a replayed trajectory was sampled (`metadata.sampling`): what GRPO needs to train on
    its logprobs as sampled (the temperature divides the logits)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop_token_ids: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able document (`stop_token_ids` a list)."""
        return {**asdict(self), "stop_token_ids": list(self.stop_token_ids)}


def metadata_sql(*path: str, column: str = "metadata", cast: str | None = None) -> str:
    """DuckDB expression: the value at `path` of a JSON text column as text (or `cast` to a type),
    NULL where absent, not convertible or not JSON at all.

    >>> metadata_sql(REPLAY_SAMPLING, "temperature", column="t.metadata", cast="DOUBLE")
    "TRY_CAST(json_extract_string(TRY_CAST(t.metadata AS JSON), '$.sampling.temperature') AS DOUBLE)"
    """
    value = f"json_extract_string(TRY_CAST({column} AS JSON), '$.{'.'.join(path)}')"
    return f"TRY_CAST({value} AS {cast})" if cast else value


def sampling_temperature_sql(column: str = "metadata") -> str:
    """The temperature a replayed trajectory was sampled at (NULL for any other trajectory)."""
    return metadata_sql(REPLAY_SAMPLING, "temperature", column=column, cast="DOUBLE")


def replay_run_sql(column: str = "metadata") -> str:
    """The name of the replay run that sampled a trajectory (NULL for production traffic)."""
    return metadata_sql(REPLAY_RUN, column=column)
