"""Every built-in tool by name, and the tool set of an agent profile.

``continue_task`` is part of every tool set, unconditionally.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.errors import InvalidInput
from .base import Tool, ToolSpec
from .builtin import CONTINUE_TASK, WORKSPACE_TOOLS
from .sessions import SESSION_TOOLS

BUILTIN_TOOLS: Mapping[str, Tool] = {
    tool.name: tool for tool in (*WORKSPACE_TOOLS, *SESSION_TOOLS, CONTINUE_TASK)
}


def tools_for(names: Iterable[str]) -> dict[str, Tool]:
    """The named tools plus ``continue_task``; an unknown name is a clear error."""
    chosen: dict[str, Tool] = {}
    for name in names:
        tool = BUILTIN_TOOLS.get(name)
        if tool is None:
            raise InvalidInput(f"unknown tool {name!r}; built-in: {', '.join(BUILTIN_TOOLS)}")
        chosen[name] = tool
    chosen[CONTINUE_TASK.name] = CONTINUE_TASK
    return chosen


@dataclass(frozen=True)
class Toolset:
    """A profile's tools by name and what a model is told about them, built once."""

    tools: Mapping[str, Tool]
    specs: tuple[ToolSpec, ...]


@functools.lru_cache(maxsize=256)
def toolset(names: tuple[str, ...]) -> Toolset:
    """:func:`tools_for` ``names``, cached: tool sets are pure, a turn reuses its profile's."""
    tools = tools_for(names)
    return Toolset(tools, tuple(tool.spec for tool in tools.values()))
