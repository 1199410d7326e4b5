"""``open_runtime``: the one call an embedding program needs.

Opens the workspace's event log (SQLite under ``<workspace>/.halo/`` by default,
or in memory), loads its agent profiles, recovers every session from the log
and runs a supervisor until the block exits; then closes the log. A workspace
directory that does not exist yet is created, with its parents.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ..agent.demo_agent import DEMO_SCRIPT
from ..agent.model import Model
from ..agent.scripted import ScriptedModel
from ..core.log import EventLog, MemoryEventLog, SqliteEventLog
from ..core.log.sqlite import Synchronous
from ..tools.base import Tool
from ..tools.files import Workspace
from ..tools.registry import ToolRegistry
from .profiles import Profiles
from .supervisor import Supervisor, open_supervisor

LOG_FILE = "events.db"


def log_path(workspace: str | Path) -> Path:
    return Path(workspace) / ".halo" / LOG_FILE


def default_model() -> ScriptedModel:
    """The scripted demo agent, for every profile without a script of its own."""
    return ScriptedModel({}, fallback=DEMO_SCRIPT)


def open_workspace(path: str | Path) -> Workspace:
    """The workspace at ``path``, creating the directory (and its parents) if missing."""
    if not os.path.lexists(path):
        Path(path).mkdir(parents=True)
    return Workspace(path)


@asynccontextmanager
async def open_runtime(
    workspace: str | Path,
    *,
    model: Model | None = None,
    profiles: Profiles | None = None,
    tools: Iterable[Tool] = (),
    durable: bool = True,
    synchronous: Synchronous = "NORMAL",
) -> AsyncIterator[Supervisor]:
    """Run the runtime of ``workspace`` until the block exits.

    ``model``: every agent's model (default: the scripted demo agent). ``profiles``:
    the agent profiles (default: the built-in ``default`` plus the workspace's
    ``.halo/agents/*.toml``). ``tools``: custom tools (``@tool``) that profiles may
    name beside the built-ins. ``durable=False`` keeps the log in memory.
    """
    registry = ToolRegistry(tools)
    ws = await trio.to_thread.run_sync(open_workspace, workspace)
    if profiles is None:
        profiles = await trio.to_thread.run_sync(Profiles.load, ws.root, registry)
    event_log: EventLog
    if durable:
        event_log = await SqliteEventLog.open(log_path(ws.root), synchronous=synchronous)
    else:
        event_log = MemoryEventLog()
    try:
        async with open_supervisor(
            event_log,
            model or default_model(),
            workspace=ws,
            profiles=profiles,
            tools=registry,
        ) as supervisor:
            yield supervisor
    finally:
        await event_log.aclose()
