"""Where tool results come from during a rollout.

- `CallableTools`: Python functions named by import path (`package.module:function`, or
  `name=package.module:function` to expose it under another name), sync or async.
- `RecordedTools`: the results recorded in the production trajectory the scenario came
  from, keyed by tool name and canonical JSON arguments. A call that was never recorded
  gets an explicit error result the model sees; nothing is invented.
- `ChainTools`: ask several sources in order (functions first, then recordings).

A tool that raises, or a call to an unknown tool, becomes an error result (`is_error`)
in the trajectory, never a crash of the batch.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from training.replay.errors import ToolSourceError
from training.replay.rollout.parsing import canonical_arguments
from training.replay.scenarios import Scenario


@dataclass(frozen=True)
class ToolResult:
    """What the model is shown for one call."""

    content: str
    is_error: bool = False


class ToolSource(ABC):
    """Answers tool calls for one scenario's rollouts."""

    @abstractmethod
    def handles(self, name: str, scenario: Scenario) -> bool:
        """Whether this source knows tool `name` for `scenario`."""

    @abstractmethod
    async def call(self, name: str, arguments: dict[str, Any], scenario: Scenario) -> ToolResult:
        """Run one call; failures come back as `ToolResult(is_error=True)`, never raised."""

    def describe(self) -> str:
        return type(self).__name__


def import_object(spec: str) -> Any:
    """`package.module:attribute` -> the object, with errors that say what was wrong."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ToolSourceError(f"`{spec}` is not an import path; write `package.module:function`", spec=spec)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolSourceError(
            f"cannot import module `{module_name}` (from `{spec}`): {exc}", spec=spec
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            available = sorted(n for n in dir(target) if not n.startswith("_"))[:20]
            raise ToolSourceError(
                f"`{module_name}` has no attribute `{attribute}`; available: {', '.join(available)}",
                spec=spec,
            )
        target = getattr(target, part)
    return target


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


class CallableTools(ToolSource):
    """Tools implemented by Python callables; keyword arguments are the model's arguments."""

    def __init__(self, functions: dict[str, Callable[..., Any]]) -> None:
        for name, fn in functions.items():
            if not callable(fn):
                raise ToolSourceError(f"tool `{name}` is a {type(fn).__name__}, not a callable", spec=name)
        self.functions = dict(functions)

    @classmethod
    def from_specs(cls, specs: Sequence[str]) -> CallableTools:
        """From `package.module:function` or `name=package.module:function` strings."""
        functions: dict[str, Callable[..., Any]] = {}
        for spec in specs:
            name, eq, path = spec.partition("=")
            if not eq:
                name, path = "", spec
            fn = import_object(path)
            functions[name or getattr(fn, "__name__", path.rpartition(":")[2])] = fn
        return cls(functions)

    def handles(self, name: str, scenario: Scenario) -> bool:
        return name in self.functions

    async def call(self, name: str, arguments: dict[str, Any], scenario: Scenario) -> ToolResult:
        fn = self.functions.get(name)
        if fn is None:
            return ToolResult(
                f"error: unknown tool `{name}`; available: {', '.join(sorted(self.functions))}", True
            )
        try:
            if inspect.iscoroutinefunction(fn):
                value = await fn(**arguments)
            else:
                value = await asyncio.to_thread(fn, **arguments)
                if inspect.isawaitable(value):
                    value = await value
        except Exception as exc:  # the model sees the failure; the batch goes on
            return ToolResult(f"error: `{name}` raised {type(exc).__name__}: {exc}", True)
        return ToolResult(_as_text(value))

    def describe(self) -> str:
        return "callables:" + ",".join(sorted(self.functions))


class RecordedTools(ToolSource):
    """Replays the tool results recorded in the scenario's source trajectory."""

    def handles(self, name: str, scenario: Scenario) -> bool:
        return any(r.get("name") == name for r in scenario.recorded_tools)

    async def call(self, name: str, arguments: dict[str, Any], scenario: Scenario) -> ToolResult:
        key = canonical_arguments(arguments)
        recorded = scenario.recorded_tools
        for entry in recorded:
            if entry.get("name") == name and canonical_arguments(entry.get("arguments") or "{}") == key:
                return ToolResult(entry.get("content") or "", bool(entry.get("is_error")))
        known = sorted(
            {f"{r.get('name')}({canonical_arguments(r.get('arguments') or '{}')})" for r in recorded}
        )
        return ToolResult(
            f"error: no recorded result for `{name}` with arguments {key}; "
            f"recorded calls: {', '.join(known) if known else 'none'}",
            True,
        )

    def describe(self) -> str:
        return "recorded"


class ChainTools(ToolSource):
    """The first source that handles a tool answers it; the last one answers whatever is left."""

    def __init__(self, sources: Sequence[ToolSource]) -> None:
        if not sources:
            raise ToolSourceError("a tool chain needs at least one source", spec="")
        self.sources = list(sources)

    def handles(self, name: str, scenario: Scenario) -> bool:
        return any(s.handles(name, scenario) for s in self.sources)

    async def call(self, name: str, arguments: dict[str, Any], scenario: Scenario) -> ToolResult:
        for source in self.sources:
            if source.handles(name, scenario):
                return await source.call(name, arguments, scenario)
        return await self.sources[-1].call(name, arguments, scenario)

    def describe(self) -> str:
        return "+".join(s.describe() for s in self.sources)


class NoTools(ToolSource):
    """No tools at all: every call gets an error result saying so."""

    def handles(self, name: str, scenario: Scenario) -> bool:
        return False

    async def call(self, name: str, arguments: dict[str, Any], scenario: Scenario) -> ToolResult:
        return ToolResult(f"error: no tools are available in this replay (called `{name}`)", True)

    def describe(self) -> str:
        return "none"


@dataclass(frozen=True)
class ToolsConfig:
    """Where a replay's tool results come from."""

    tool: tuple[str, ...] = field(
        default=(),
        metadata={"help": "Tool function `[name=]package.module:function`, sync or async (repeatable)."},
    )
    recorded: bool = field(
        default=True,
        metadata={"help": "Answer other tool calls with the results recorded in the source trajectory."},
    )

    def build(self) -> ToolSource:
        return make_tools(self.tool, recorded=self.recorded)


def make_tools(callables: Sequence[str] = (), *, recorded: bool = True) -> ToolSource:
    """The usual setup: the named callables (if any), then the recorded results (if asked)."""
    sources: list[ToolSource] = []
    if callables:
        sources.append(CallableTools.from_specs(callables))
    if recorded:
        sources.append(RecordedTools())
    if not sources:
        return NoTools()
    return sources[0] if len(sources) == 1 else ChainTools(sources)
