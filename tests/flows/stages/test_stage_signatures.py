"""Stages say what configures them: each takes the sections of the settings it reads (never the
whole `Settings`) and the lake its flow opened once; and no stage shares a library function's name."""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

import pytest

from flows import stages
from store.lake import Lake

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # moves freely


def public_functions(*folders: str) -> dict[str, list[str]]:
    """Each public top-level function name of the folders' modules -> the files defining it."""
    found: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                    found[node.name].append(str(path.relative_to(ROOT)))
    return found


def test_no_stage_function_takes_the_whole_settings() -> None:
    takes_all = [
        f"{name}({parameter.name})"
        for name in stages.__all__
        if inspect.isfunction(function := getattr(stages, name))
        for parameter in inspect.signature(function).parameters.values()
        if "Settings" in {str(parameter.annotation), getattr(parameter.annotation, "__name__", "")}
    ]
    assert takes_all == []


def test_stage_functions_have_names_of_their_own() -> None:
    """`flows.stages.train.train_sft` calling `training.sft.train_sft` read as recursion and made a
    traceback ambiguous; two `apply_retention`s in `flows.stages` were two different things."""
    in_stages = public_functions("flows/stages")
    libraries = public_functions("store", "ingest", "judging", "training")
    assert {name: files for name, files in in_stages.items() if len(files) > 1} == {}
    assert {name: in_stages[name] + libraries[name] for name in in_stages if name in libraries} == {}


@pytest.mark.slow  # a Prefect server for the session (~12 s to start)
@pytest.mark.usefixtures("prefect_api")
def test_a_flow_opens_its_lake_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.prefect_flows import ingest_flow

    lake = Lake(str(tmp_path / "lake"))
    opened: list[str] = []
    problem = Lake.problem

    def checked(self: Lake, *, must_exist: bool) -> str | None:
        opened.append(self.root)  # `store.lake.open_lake` checks each lake it opens
        return problem(self, must_exist=must_exist)

    monkeypatch.setattr(Lake, "problem", checked)
    config = tmp_path / "trajlake.toml"
    config.write_text("[retention]\nproduction_days = 7\n")  # retention runs on the same lake
    counts = ingest_flow(config_file=str(config), lake=lake.root)
    assert counts["assembled_trajectories"] == counts["retention_erased_trajectories"] == 0
    assert opened == [lake.root]
