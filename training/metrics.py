"""Training callbacks: per-step metrics into the lake's `runs` table, and a non-finite loss guard.

TRL already computes the metrics worth keeping (loss, grad norm, learning rate, entropy,
clip ratios, KL, reward mean/std, token counts); `RunsTableCallback` only adds tokens/s
and commits each logged step as a `runs` row (`run_id`, `step`, `stage`, `metrics` JSON),
so a killed run keeps every step it acknowledged. W&B and TensorBoard stay TRL's
business (`report_to`), fed by the same logs.

`ProgressLog` says where a run is, one line per logged step (at most every few seconds) to
the `training.progress` logger: the step of how many, the loss (and GRPO's reward), the
time per step and what is left. A console shows it through `flows.progress`, a Prefect run's
log through `PREFECT_LOGGING_EXTRA_LOGGERS`; the library itself prints nothing.

`NonFiniteLossGuard` stops a run whose loss or gradient norm turns NaN/inf at the step it
is logged, and stops the Trainer from saving a checkpoint of the broken weights, so the
newest checkpoint on disk is the last good one.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from store.lake import Lake
from store.rows import runs_row
from store.writer import write
from training.distributed import is_writer

# Keys TRL logs that are not per-step metrics (end-of-training summaries are kept, under their names).
_SKIP = frozenset({"epoch_end"})


class RunsTableCallback(TrainerCallback):
    """Write every logged step to the `runs` table.

    Rows are buffered and committed together at each checkpoint save, at the end of
    training and at least every `flush_every_s` seconds: one Parquet commit per step
    would cost more than a step of a small model. Flushing at each checkpoint keeps the
    table consistent with resume, which replays the steps after the newest checkpoint
    (a replayed step's row supersedes the earlier one: same key, newer `_written_at`).
    """

    def __init__(
        self,
        lake: Lake | str,
        run_id: str,
        stage: str,
        extra: dict[str, Any] | None = None,
        flush_every_s: float = 30.0,
    ) -> None:
        self.lake = Lake.of(lake)
        self.run_id = run_id
        self.stage = stage
        self.extra = dict(extra or {})
        self.flush_every_s = flush_every_s
        self.rows_written = 0
        self._buffer: dict[int, dict[str, Any]] = {}
        self._last_flush = time.monotonic()
        self._last_time: float | None = None
        self._last_tokens: float | None = None
        self._last: tuple[int, dict[str, Any]] | None = None

    def flush(self) -> None:
        """Commit the buffered rows (one write; under several processes, rank 0's only)."""
        if self._buffer and not is_writer():
            self._buffer.clear()  # every rank logs the same (gathered) metrics: rank 0 writes them
        if self._buffer:
            rows = [runs_row(self.run_id, step, self.stage, m) for step, m in sorted(self._buffer.items())]
            write(self.lake, "runs", rows)
            self.rows_written += len(rows)
            self._buffer.clear()
        self._last_flush = time.monotonic()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._last_time = time.perf_counter()
        self._last_tokens = float(state.num_input_tokens_seen or 0)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        metrics = {k: v for k, v in logs.items() if k not in _SKIP and isinstance(v, (int, float, str, bool))}
        now = time.perf_counter()
        tokens = float(state.num_input_tokens_seen or metrics.get("num_tokens") or 0)
        if self._last_time is not None and self._last_tokens is not None and tokens > self._last_tokens:
            metrics["tokens_per_second"] = (tokens - self._last_tokens) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_tokens = now, tokens
        metrics.update(self.extra)
        step = int(state.global_step)
        # The end-of-training summary is logged at the last step: merge it into that step's row
        # (even when that row was already flushed: the merged row supersedes it).
        earlier = self._buffer.get(step) or (self._last[1] if self._last and self._last[0] == step else {})
        self._buffer[step] = {**earlier, **metrics}
        self._last = (step, self._buffer[step])
        if "train_runtime" in metrics or time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.is_world_process_zero:
            self.flush()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.is_world_process_zero:
            self.flush()


def is_finite_log(logs: dict[str, Any]) -> bool:
    """False when a logged loss or gradient norm is NaN or infinite."""
    for key in ("loss", "grad_norm"):
        value = logs.get(key)
        if isinstance(value, (int, float)) and not math.isfinite(value):
            return False
    return True


PROGRESS = logging.getLogger("training.progress")


class ProgressLog(TrainerCallback):
    """One line per logged step, `every_s` seconds apart at most (the first and last always):
    `sft step 12/40: loss 1.2345, 0.8 s/step, 22 s left`, plus GRPO's mean reward."""

    def __init__(self, stage: str, every_s: float = 5.0) -> None:
        self.stage = stage
        self.every_s = every_s
        self._started: float | None = None
        self._first_step = 0
        self._last_line = -math.inf

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._started = time.monotonic()
        self._first_step = int(state.global_step)  # a resumed run counts its own steps' pace
        if is_writer():
            PROGRESS.info("%s: %s steps to train", self.stage, state.max_steps - state.global_step)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        if not logs or "loss" not in logs or not is_writer():
            return
        now = time.monotonic()
        step, total = int(state.global_step), int(state.max_steps)
        if now - self._last_line < self.every_s and step not in (1, total):
            return
        self._last_line = now
        PROGRESS.info(
            "%s",
            progress_line(
                self.stage, step, total, logs, now - (self._started or now), step - self._first_step
            ),
        )


def progress_line(stage: str, step: int, total: int, logs: dict[str, Any], elapsed: float, done: int) -> str:
    """A training step in one line.

    >>> progress_line("grpo", 3, 10, {"loss": 0.01234, "reward": 0.5}, 6.0, 3)
    'grpo step 3/10: loss 0.0123, reward 0.500, 2.0 s/step, 14 s left'
    """
    parts = [f"loss {float(logs['loss']):.4f}"]
    if "reward" in logs:
        parts.append(f"reward {float(logs['reward']):.3f}")
    if done > 0:
        per_step = elapsed / done
        parts += [f"{per_step:.1f} s/step", f"{per_step * max(total - step, 0):.0f} s left"]
    return f"{stage} step {step}/{total}: " + ", ".join(parts)


class NonFiniteLossGuard(TrainerCallback):
    """Stop training (without checkpointing the broken weights) when the loss or grad norm is not finite."""

    def __init__(self) -> None:
        self.tripped_at: int | None = None
        self.evidence: dict[str, Any] = {}

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> TrainerControl:
        if logs and not is_finite_log(logs) and self.tripped_at is None:
            self.tripped_at = int(state.global_step)
            self.evidence = {k: logs.get(k) for k in ("loss", "grad_norm") if k in logs}
        if self.tripped_at is not None:
            control.should_training_stop = True
            control.should_save = False
        return control


class BarOnly(ProgressCallback):
    """transformers' progress bar without the raw `{'loss': ...}` lines it writes under it: every
    logged step is a `runs` row, and the stage prints its own summary."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        return None


def without_raw_log_lines(trainer: Any) -> None:
    """The trainer with `BarOnly` for its progress (transformers prints the raw lines from
    `ProgressCallback.on_log`, or from `PrinterCallback` when the bar is off)."""
    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(BarOnly)
