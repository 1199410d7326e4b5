"""Every built-in tool by name, and the tool set of an agent profile.

``continue_task`` is part of every tool set, unconditionally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.errors import InvalidInput
from .base import Tool
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
