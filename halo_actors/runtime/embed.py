"""``open_runtime``: the one call an embedding program needs.

Opens the workspace's event log (SQLite under ``<workspace>/.halo/`` by default,
or in memory), loads its agent profiles, recovers every session from the log
and runs a supervisor until the block exits; then closes the log. A workspace
directory that does not exist yet is created, with its parents.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ..agent.demo_agent import DEMO_SCRIPT
from ..agent.model import Model
from ..agent.scripted import ScriptedModel
from ..core.log import EventLog, MemoryEventLog, SqliteEventLog
from ..core.log.sqlite import Synchronous
from ..tools.files import Workspace
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
    durable: bool = True,
    synchronous: Synchronous = "NORMAL",
) -> AsyncIterator[Supervisor]:
    ws = await trio.to_thread.run_sync(open_workspace, workspace)
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
            profiles=profiles or Profiles.load(ws.root),
        ) as supervisor:
            yield supervisor
    finally:
        await event_log.aclose()
