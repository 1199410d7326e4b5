"""Every tool by name: the built-ins plus an embedding program's own, and the tool
set of an agent profile.

``continue_task`` is part of every tool set, unconditionally. A custom tool may not
take a built-in's name (nor may two custom tools share one); a profile naming a
tool that is neither is a clear error, listing the names that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.errors import InvalidInput
from .base import Tool, ToolSpec
from .builtin import CONTINUE_TASK, WORKSPACE_TOOLS
from .sessions import SESSION_TOOLS

BUILTIN_TOOLS: Mapping[str, Tool] = {
    tool.name: tool for tool in (*WORKSPACE_TOOLS, *SESSION_TOOLS, CONTINUE_TASK)
}


@dataclass(frozen=True)
class Toolset:
    """A profile's tools by name and what a model is told about them, built once."""

    tools: Mapping[str, Tool]
    specs: tuple[ToolSpec, ...]


class ToolRegistry:
    """The tools one runtime offers: the built-ins and ``custom`` (from ``@tool``).

    Tool sets are pure, so :meth:`toolset` caches them: a turn reuses its profile's.
    """

    def __init__(self, custom: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = dict(BUILTIN_TOOLS)
        self.custom: tuple[Tool, ...] = tuple(custom)
        for tool in self.custom:
            if not isinstance(tool, Tool):
                raise TypeError(f"{tool!r} is not a tool; decorate it with @tool")
            if tool.name in self._tools:
                taken = "a built-in" if tool.name in BUILTIN_TOOLS else "another custom tool"
                raise InvalidInput(f"custom tool {tool.name!r}: the name is taken by {taken}")
            self._tools[tool.name] = tool
        self._sets: dict[tuple[str, ...], Toolset] = {}

    def names(self) -> list[str]:
        """Built-ins first, in their order, then the custom tools in theirs."""
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def unknown(self, names: Iterable[str]) -> str | None:
        """The first of ``names`` that is no tool here, or None."""
        return next((name for name in names if name not in self._tools), None)

    def describe_unknown(self, name: str) -> str:
        custom = [t.name for t in self.custom]
        known = f"built-in: {', '.join(BUILTIN_TOOLS)}"
        return f"unknown tool {name!r}; {known}" + (
            f"; custom: {', '.join(custom)}" if custom else "; no custom tools registered"
        )

    def tools_for(self, names: Iterable[str]) -> dict[str, Tool]:
        """The named tools plus ``continue_task``; an unknown name is a clear error."""
        chosen: dict[str, Tool] = {}
        for name in names:
            tool = self._tools.get(name)
            if tool is None:
                raise InvalidInput(self.describe_unknown(name))
            chosen[name] = tool
        chosen[CONTINUE_TASK.name] = CONTINUE_TASK
        return chosen

    def toolset(self, names: tuple[str, ...]) -> Toolset:
        found = self._sets.get(names)
        if found is None:
            tools = self.tools_for(names)
            found = Toolset(tools, tuple(tool.spec for tool in tools.values()))
            if len(self._sets) < 256:
                self._sets[names] = found
        return found


BUILTINS = ToolRegistry()
"""The registry of a runtime without custom tools."""


def tools_for(names: Iterable[str]) -> dict[str, Tool]:
    """:meth:`ToolRegistry.tools_for` of the built-ins only."""
    return BUILTINS.tools_for(names)


def toolset(names: tuple[str, ...]) -> Toolset:
    """:meth:`ToolRegistry.toolset` of the built-ins only."""
    return BUILTINS.toolset(names)
