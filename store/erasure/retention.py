"""`[retention]`: how long production data stays in the lake, declared apart from the erasure's
steps so that reading the settings loads none of their libraries (`pyarrow.dataset` imports
pandas: `trajlake collect --help` spent 0.19 s on it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from store.errors import SettingError


@dataclass(frozen=True)
class RetentionConfig:
    """How long production data stays in the lake (`[retention]`)."""

    production_days: float = field(
        default=0.0,
        metadata={
            "help": "Erase production conversations (and everything derived from them, as `trajlake "
            "forget` does) older than this many days, on each scheduled ingest (0: keep forever)."
        },
    )

    def __post_init__(self) -> None:
        if self.production_days < 0:
            raise SettingError(
                f"`retention.production_days` must be >= 0, got {self.production_days}",
                field="production_days",
                value=self.production_days,
            )

    def cutoff(self, now: datetime) -> datetime | None:
        """The time before which production data goes; None when kept forever."""
        return now - timedelta(days=self.production_days) if self.production_days else None
