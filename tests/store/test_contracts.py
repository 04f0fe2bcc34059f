"""Every lake shape another package reads or writes is declared in `store` (issue 47): no JSON path
into a lake document and no `runs.metrics` name is typed outside its declaring module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.assembly.normalize.types import make_message, make_tool_call
from store.messages import lake_message, lake_tool_call
from store.metrics import DIFF_PREFIX, GRPO_METRICS, EvaluationTableRow, is_table_row
from store.policy_names import join_policy, split_policy
from store.sampling import SamplingRecord
from store.schema import MESSAGE, SAMPLING, TOOL_CALL

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ingest", "judging", "training", "flows")
JSON_PATH = re.compile(r"\$\.[\w\"]")


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant of a module (f-string parts included), docstrings left out."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _offences(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for line, text in _strings(ast.parse(path.read_text())):
        where = f"{path.relative_to(root)}:{line}"
        if JSON_PATH.search(text):
            found.append(f"{where}: JSON path in {text[:60]!r}")
        if text in GRPO_METRICS or text.startswith(DIFF_PREFIX):
            found.append(f"{where}: metric name {text!r}")
    return found


# Where a JSON path is the point: the upgrade of rows written before their typed columns, and the
# user's own span attributes (open-ended names `forget` matches).
JSON_READERS = ("store/migrate.py", "store/identity.py")


def test_no_json_path_or_metric_name_outside_store() -> None:
    found = [
        o for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py")) for o in _offences(path)
    ]
    found += [
        o
        for path in sorted((ROOT / "store").rglob("*.py"))
        if str(path.relative_to(ROOT)) not in JSON_READERS
        for o in _offences(path)
        if "JSON path" in o  # metric names are declared in store
    ]
    assert found == [], "declare these in store (store.sampling, store.metrics):\n" + "\n".join(found)


def _imports(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports, at module level or inside a function
    (an import under `TYPE_CHECKING` is for annotations and runs nothing)."""
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {module: set() for module in paths}
    for module, path in paths.items():
        tree = ast.parse(path.read_text())
        skipped = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            # a module importing its own package's __init__ is how a package exposes names, not a loop
            graph[module] |= {
                t for t in targets if t in paths and t != module and not module.startswith(t + ".")
            }
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import loop of `graph` (empty when there is none), by depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


@pytest.mark.parametrize("package", ["store", *PACKAGES])
def test_no_import_cycle_inside_a_package(package: str) -> None:
    assert _cycle(_imports(package)) == []


@pytest.mark.parametrize(
    "package",
    [
        "store",
        "store.erasure",
        "training",
        "training.replay",
        "judging",
        "ingest.langfuse",
        "ingest.langfuse.export",
    ],
)
def test_a_package_that_lists_its_surface_imports_nothing(package: str) -> None:
    # Issue 57: the docstring names each public name's module and callers import it from there;
    # no lazy exports (a lazy_loader module broke pickling by value for Dask), no re-exports.
    tree = ast.parse(ROOT.joinpath(*package.split("."), "__init__.py").read_text())
    assert ast.get_docstring(tree), package
    assert [ast.unparse(node) for node in tree.body[1:]] == [], f"`{package}/__init__.py` runs code"


def test_the_cycle_search_finds_a_loop() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


# Replay and the trainers share these and nothing else; neither side owns them (DESIGN.md, issue 57).
REPLAY = "training.replay"
SHARED = ("training.chat", "training.models", "training.errors")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _boundary_offences(graph: dict[str, set[str]]) -> list[str]:
    """`importer -> imported` for every import of `training`'s graph that crosses the replay/trainer
    boundary: replay importing a trainer module, a trainer module importing anything of replay,
    or a shared package importing either (the `training` package itself imports nothing)."""
    found = []
    for module in sorted(graph):
        for target in sorted(graph[module] - {"training"}):
            if _within(module, (REPLAY,)):
                crosses = not _within(target, (REPLAY, *SHARED))
            elif _within(module, SHARED):
                crosses = not _within(target, SHARED)
            else:  # a trainer module (sft, grpo, run, datasets, publish, ...)
                crosses = _within(target, (REPLAY,))
            if crosses:
                found.append(f"{module} -> {target}")
    return found


def test_replay_and_the_trainers_import_each_other_only_through_the_shared_packages() -> None:
    found = _boundary_offences(_imports("training"))
    assert found == [], (
        "replay imports no trainer module and the trainers import nothing of replay; move what both "
        f"use to one of {SHARED}:\n" + "\n".join(found)
    )


def test_the_boundary_check_finds_a_crossing() -> None:
    graph = {
        "training.replay.samplers.hf": {"training.models.known", "training.checkpointing", "training"},
        "training.sft": {"training.chat.render", "training.replay.rollout.render"},
        "training.chat.render": {"training.chat.templates", "training.replay.errors"},
        "training.models.known": {"training.errors", "training.run"},
        "training.chat.templates": set(),
    }
    assert _boundary_offences(graph) == [
        "training.chat.render -> training.replay.errors",
        "training.models.known -> training.run",
        "training.replay.samplers.hf -> training.checkpointing",
        "training.sft -> training.replay.rollout.render",
    ]


def test_the_walk_finds_what_it_looks_for(tmp_path: Path) -> None:
    # the check above would pass on a walk that never matches: show it matching
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""A docstring may say $.sampling."""\n'
        "SQL = \"json_extract_string(m, '$.run')\"\n"
        'GAP = "sampling/sampling_logp_difference/mean"\n'
        'DIFF = f"diff_{1}"\n'
    )
    assert [o.split(": ", 1)[1] for o in _offences(sample, tmp_path)] == [
        "JSON path in \"json_extract_string(m, '$.run')\"",
        "metric name 'sampling/sampling_logp_difference/mean'",
        "metric name 'diff_'",
    ]


def test_an_evaluation_row_reads_back_as_written() -> None:
    row = EvaluationTableRow("grpo-2", "m+grpo", "val", 0.7, 0.6, 0.8, 32, {"sft": (0.1, 0.02, 0.18)})
    metrics = {"role": "table", "reward": "exact_match", **row.to_metrics()}
    assert metrics["diff_sft"] == 0.1 and metrics["diff_sft_ci_high"] == 0.18
    assert is_table_row(metrics) and EvaluationTableRow.from_metrics(metrics) == row
    assert not is_table_row({"role": "candidate"})


def test_the_sampling_record_is_the_sampling_column() -> None:
    record = SamplingRecord(
        max_tokens=64, temperature=0.7, top_p=1.0, top_k=0, seed=None, stop_token_ids=(2,)
    )
    column = record.to_column()
    assert column["stop_token_ids"] == [2] and record.distribution == (0.7, 1.0, 0)
    assert pa.array([column], SAMPLING).to_pylist() == [column]  # the struct takes it field for field


def test_one_message_shape_the_schema_declares() -> None:
    fields = [f.name for f in MESSAGE]
    assert list(lake_message("user", "Hi")) == fields
    assert list(lake_tool_call("c1", "add", "{}")) == [f.name for f in TOOL_CALL]
    call = lake_tool_call("c1", "add", '{"a":1}')
    # the assembler's compiled builder: the same struct, framework roles mapped
    assert make_message("human", "Hi", tool_calls=[call]) == lake_message("user", "Hi", tool_calls=[call])
    assert make_tool_call(" c1", "add", {"a": 1}) == call


@pytest.mark.parametrize(
    ("base", "adapter"), [("org/model", "grpo-1"), ("tiny", None), ("tiny", "lora@ab12")]
)
def test_a_policy_name_splits_back_into_its_parts(base: str, adapter: str | None) -> None:
    assert split_policy(join_policy(base, adapter)) == (base, adapter)
