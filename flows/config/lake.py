"""`[lake]` alone, for the commands that only open the lake (`trajlake sql`, `tables`, `forget`):
the same sources as `Settings`, without importing any library's section."""

from __future__ import annotations

import os

from flows.config.naming import ENV_PREFIX, config_file
from flows.config.sections import LakeSettings

# Every variable pydantic-settings would read for `[lake]` starts so (`TRAJLAKE_LAKE`, the lake's
# folder; `TRAJLAKE_LAKE__SQL_TIMEOUT_S`, ...), in any case: it reads the environment case-blind.
LAKE_VARIABLES = f"{ENV_PREFIX}LAKE"


def load_lake(path: str | os.PathLike[str] | None = None) -> LakeSettings:
    """`[lake]` as in effect: `$TRAJLAKE_LAKE`, the environment, the file, the declared defaults."""
    file = config_file(path)
    if file is None and not any(name.upper().startswith(LAKE_VARIABLES) for name in os.environ):
        # Nothing for pydantic-settings to read: `[lake]` is its declared defaults, and `trajlake
        # sql` does not import pydantic-settings (a third of its start-up: bench/startup.py).
        return LakeSettings()
    from flows.config.lake_sources import read_lake  # pydantic-settings: only with a source to read

    return read_lake(file)
