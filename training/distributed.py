"""Training under several processes (`accelerate launch`, `torchrun`): one snapshot, one writer.

TRL's trainers already run data-parallel when launched that way (DDP; gloo on CPUs,
NCCL on GPUs). What trajlake adds is the part that touches the lake and the run folder:

- every rank selects its rows from the same table versions: rank 0 reads the lake's
  current versions and broadcasts them, the others select `as_of` those (a commit landing
  between two ranks' reads cannot give them different rows);
- one run id, chosen by rank 0; only rank 0 writes the run folder's state, the `runs`
  rows, the adapter and the run record (checkpoints are the Trainer's: it saves on the
  main process), and the others wait for it before returning.

Single-process runs pass through every function unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from store.lake import Lake
from training.errors import TrainingError
from training.lineage import READ_TABLES, selection_snapshot

T = TypeVar("T")


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_writer() -> bool:
    """True on rank 0 (and in a single process): the one process that writes."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def from_writer(value: T) -> T:
    """Rank 0's `value` on every rank (a no-op in a single process)."""
    if world_size() == 1:
        return value
    import torch.distributed as dist

    box = [value if is_writer() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def shared_snapshot(lake: Lake, as_of: Mapping[str, int] | None) -> Mapping[str, int] | None:
    """The table versions every rank selects from: `as_of` when given, else the versions rank 0
    sees now (None in a single process: read the lake as it is)."""
    if as_of is not None or world_size() == 1:
        return as_of
    versions: dict[str, int] | None = None
    if is_writer():
        snapshot = selection_snapshot(lake)
        versions = {t: v for t in READ_TABLES if (v := snapshot[t].version) is not None}
    return from_writer(versions)


def wait_for_writer() -> None:
    """Every rank waits here until rank 0 has written what it writes."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.barrier()


def on_writer(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)` on rank 0, its result on every rank; its error raised on every rank."""
    if world_size() == 1:
        return fn(*args, **kwargs)

    outcome: tuple[str, Any] | None = None
    error: Exception | None = None
    if is_writer():
        try:
            outcome = ("ok", fn(*args, **kwargs))
        except Exception as exc:  # every rank must hear of it, or the others wait forever
            error, outcome = exc, ("error", str(exc))
    status, value = from_writer(outcome)  # type: ignore[misc]
    if error is not None:
        raise error
    if status == "error":
        raise TrainingError(f"rank 0 stopped: {value}")
    return value
