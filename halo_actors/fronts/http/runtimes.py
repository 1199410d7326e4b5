"""One runtime per workspace, opened on demand inside the server's nursery.

A workspace's runtime (its SQLite log under ``<workspace>/.halo/`` and its
supervisor) is opened the first time a request needs it and stays open until the
server shuts down; :meth:`Runtimes.aclose` closes all of them (their running turns
are closed with a terminal event by the supervisor).

Invariants:
- at most one runtime per workspace: callers name a workspace by its realpath
  (tokens store realpaths, overrides are resolved); opens are serialised by one lock;
- ``get(..., create=False)`` never creates ``.halo/``: a workspace without an event
  log answers ``None`` (read routes treat it as "no sessions"); with a shared
  PostgreSQL store (``cluster``) there is no ``.halo/`` and the runtime opens;
- every runtime's task lives in the nursery handed to the constructor;
- a workspace that cannot hold runtime state (``/proc``, ``/sys``, a read-only
  directory: creating ``.halo/`` fails) is a 400 naming the reason, never a 500;
- every runtime's sessions default to the ``workspace`` level (a session always records
  its creator's level; only one logged before levels existed lacks it), and their
  sandbox masks the ``.halo`` of every open workspace.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import trio

from ...agent.model import Model
from ...core.errors import StoreFailed
from ...core.logger import get_logger
from ...runtime.embed import log_path, open_runtime
from ...runtime.ownership import ClusterStore
from ...runtime.passivation import DEFAULT_RESIDENT_IDLE
from ...runtime.supervisor import Supervisor
from ...tools.base import Tool
from ...tools.files import HALO_DIR
from ...tools.sandbox import Sandbox
from .errors import ApiError

log = get_logger("halo_actors.http")


class Runtimes:
    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        model: Model | str | None = None,
        hidden: Callable[[], Iterable[str]] = tuple,
        tools: tuple[Tool, ...] = (),
        cluster: ClusterStore | None = None,
        resident_idle: int | None = DEFAULT_RESIDENT_IDLE,
    ) -> None:
        self._nursery = nursery
        self._cluster = cluster
        self._resident_idle = resident_idle
        self._model = model
        self._tools = tools
        self.sandbox = Sandbox(hidden=lambda: (*hidden(), *self._state_dirs()))
        """One sandbox for every workspace: it masks each open workspace's ``.halo``
        and whatever ``hidden`` names (the front: token state, tokens' workspaces)."""
        self._open: dict[str, Supervisor] = {}
        self._lock = trio.Lock()
        self._closing = trio.Event()
        self._closed = trio.Event()
        self._hosted = 0

    def opened(self) -> dict[str, Supervisor]:
        """The runtimes open now, by workspace realpath."""
        return dict(self._open)

    def _state_dirs(self) -> list[str]:
        return [os.path.join(workspace, HALO_DIR) for workspace in self._open]

    async def get(self, workspace: str | Path, *, create: bool = True) -> Supervisor | None:
        key = os.fspath(workspace)
        found = self._open.get(key)
        if found is not None:
            return found
        local = self._cluster is None  # a shared store has no .halo/ to look for
        if not create and local and not await trio.to_thread.run_sync(log_path(key).exists):
            return None
        async with self._lock:
            if key not in self._open:
                if self._closing.is_set():
                    raise trio.ClosedResourceError("the server is shutting down")
                try:
                    self._open[key] = await self._nursery.start(self._host, key)
                except OSError as exc:
                    reason = exc.strerror or type(exc).__name__
                    raise ApiError(
                        400, f"the workspace cannot hold runtime state: {reason}"
                    ) from None
            return self._open[key]

    async def _host(
        self, workspace: str, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self._hosted += 1
        started = False
        try:
            # A session logged before levels were recorded gets the sandbox: fail closed.
            async with open_runtime(
                workspace,
                model=self._model,
                access="workspace",
                sandbox=self.sandbox,
                tools=self._tools,
                cluster=self._cluster,
                resident_idle=self._resident_idle,
            ) as supervisor:
                log.info("runtime_opened", workspace=workspace)
                task_status.started(supervisor)
                started = True
                await self._closing.wait()
        except StoreFailed as exc:  # fail-stop: this runtime ends; the next request reopens it
            if not started:
                raise
            log.error("runtime_stopped", workspace=workspace, error=str(exc))
        finally:
            self._open.pop(workspace, None)
            self._hosted -= 1
            if self._hosted == 0 and self._closing.is_set():
                self._closed.set()

    async def aclose(self) -> None:
        """Close every runtime and wait until all are closed."""
        self._closing.set()
        async with self._lock:
            if self._hosted == 0:
                return
        await self._closed.wait()
