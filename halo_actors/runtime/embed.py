"""``open_runtime``: the one call an embedding program needs.

Opens the workspace's event log (SQLite under ``<workspace>/.halo/`` by default,
or in memory), loads its agent profiles, resolves each profile's model (a bad
model spec or a missing API key stops it here, before anything runs), recovers
every session from the log and runs a supervisor until the block exits; then
closes the providers it made and the log. A workspace directory that does not
exist yet is created, with its parents.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ..agent.model import Model
from ..core.access import Access
from ..core.log import EventLog, MemoryEventLog, SqliteEventLog
from ..core.log.sqlite import Synchronous
from ..tools.base import Tool
from ..tools.files import Workspace
from ..tools.registry import ToolRegistry
from ..tools.sandbox import Sandbox
from .models import ProfileModels, resolve_model
from .ownership import ClusterStore
from .passivation import DEFAULT_RESIDENT_IDLE
from .profiles import Profiles
from .supervisor import Supervisor, open_supervisor

LOG_FILE = "events.db"


def log_path(workspace: str | Path) -> Path:
    return Path(workspace) / ".halo" / LOG_FILE


def open_workspace(path: str | Path) -> Workspace:
    """The workspace at ``path``, creating the directory (and its parents) if missing."""
    if not os.path.lexists(path):
        Path(path).mkdir(parents=True)
    return Workspace(path)


@asynccontextmanager
async def open_runtime(
    workspace: str | Path,
    *,
    model: Model | str | None = None,
    profiles: Profiles | None = None,
    tools: Iterable[Tool] = (),
    durable: bool = True,
    synchronous: Synchronous = "NORMAL",
    access: Access = "full",
    sandbox: Sandbox | None = None,
    cluster: ClusterStore | None = None,
    resident_idle: int | None = DEFAULT_RESIDENT_IDLE,
) -> AsyncIterator[Supervisor]:
    """Run the runtime of ``workspace`` until the block exits.

    ``model``: every agent's model: a ``Model`` (a provider, a ScriptedModel, your
    own), a spec such as ``"anthropic:claude-sonnet-4-5"`` (endpoint and key from the
    environment), or None for the scripted demo agent; a profile may name its own
    (``docs/models.md``). ``profiles``:
    the agent profiles (default: the built-in ``default`` plus the workspace's
    ``.halo/agents/*.toml``). ``tools``: custom tools (``@tool``) that profiles may
    name beside the built-ins. ``durable=False`` keeps the log in memory.

    ``access`` is the level of the sessions this program creates without naming one
    (``create_session(access=...)`` picks per session): ``full`` by default, because
    the embedding program is trusted; pass ``"workspace"`` to sandbox every command
    (``docs/security.md``). ``sandbox`` configures that sandbox (default: bubblewrap,
    nothing else hidden).

    ``cluster``: keep the log in PostgreSQL, shared with other nodes (``docs/deploy.md``):
    this runtime then owns only the trees whose lease it holds (``cluster.py``).
    ``resident_idle``: how many sessions at rest stay in memory; the others are
    passivated and rebuilt from the log when addressed (None: never; a log that cannot
    be read synchronously never passivates; ``docs/design/passivation.md``).
    """
    registry = ToolRegistry(tools)
    ws = await trio.to_thread.run_sync(open_workspace, workspace)
    if profiles is None:
        profiles = await trio.to_thread.run_sync(Profiles.load, ws.root, registry)
    own = isinstance(model, str)
    default = resolve_model(model)
    models = ProfileModels(default, profiles)
    event_log: EventLog
    if cluster is not None:
        from ..core.log.postgres import PostgresEventLog

        event_log = await PostgresEventLog.open(
            cluster.dsn, schema=cluster.workspace_schema(ws.root), node_id=cluster.node_id
        )
    elif durable:
        event_log = await SqliteEventLog.open(log_path(ws.root), synchronous=synchronous)
    else:
        event_log = MemoryEventLog()
    try:
        async with _supervisor(
            event_log,
            cluster,
            models,
            workspace=ws,
            profiles=profiles,
            tools=registry,
            access=access,
            sandbox=sandbox,
            resident_idle=resident_idle,
        ) as supervisor:
            yield supervisor
    finally:
        with trio.CancelScope(shield=True):
            await models.aclose()
            if own and hasattr(default, "aclose"):
                await default.aclose()
        await event_log.aclose()


def _supervisor(
    event_log: EventLog, cluster: ClusterStore | None, model: Model, **kwargs: Any
) -> AbstractAsyncContextManager[Supervisor]:
    if cluster is None:
        return open_supervisor(event_log, model, **kwargs)
    from ..core.log.postgres import PostgresEventLog
    from .cluster import open_node_supervisor

    assert isinstance(event_log, PostgresEventLog)
    return open_node_supervisor(event_log, cluster.lease_ttl, model=model, **kwargs)
