"""The pipeline's first stages run by hand, as a user would from Python (the stages' own API)."""

from __future__ import annotations

from pathlib import Path

from flows import stages
from flows.config.checks import load_config


def sft_by_hand(lake: Path, config: Path) -> str:
    """Scenarios, then SFT, on `lake` with the settings of `config`: the adapter's folder."""
    settings = load_config(config).with_lake(str(lake))
    the_lake = stages.lake_of(settings.lake)
    stages.make_scenarios(the_lake, select=settings.select, scenarios=settings.scenarios)
    return stages.sft_stage(
        the_lake,
        "pipeline-by-hand",
        select=settings.select,
        train=settings.train,
        sampler=settings.sampler,
        pipeline=settings.pipeline,
    ).adapter_dir
