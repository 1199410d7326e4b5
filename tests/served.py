"""A real server as a subprocess (``python -m halo_actors serve``): browser and CLI tests.

A subprocess (not the in-process harness) so that a test can stop it and start it
again on the same port and the same workspace, as a restart in production would.
It plays the built-in demo agent (``count to N``, ``run <command>``, ``spawn N
<task>``, echo). :class:`ServedPage` stops it (SIGTERM, then SIGKILL after a grace
period) and waits for it, so no process outlives a test.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import trio

from halo_actors.core.events import Record
from halo_actors.core.log import EventFilter, SqliteEventLog
from halo_actors.fronts.http.tokens import TokenStore
from halo_actors.runtime.embed import log_path

START_BUDGET = 20.0
"""Seconds a server may take to start listening (a loaded 2-core machine)."""
STOP_GRACE = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class WebServer:
    tmp: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None

    @property
    def workspace(self) -> Path:
        return self.tmp / "ws"

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self, access: str = "full", account: str = "alice") -> str:
        self.workspace.mkdir(parents=True, exist_ok=True)
        return TokenStore(self.state).create(account, access, self.workspace)

    def start(self) -> None:
        assert self.process is None, "already running"
        self.workspace.mkdir(parents=True, exist_ok=True)
        args = ["--port", str(self.port), "--state", str(self.state)]
        args += ["--workspace", str(self.workspace), "--keepalive", "5"]
        self.process = spawn_serve(args, self.tmp / "server.log", "the server")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def records(self, root: str) -> list[Record]:
        """Every record of ``root``'s tree, read from the workspace's log (read-only)."""
        return trio.run(self._read, root)

    async def _read(self, root: str) -> list[Record]:
        log = await SqliteEventLog.open(log_path(self.workspace), read_only=True)
        try:
            return await log.read(EventFilter(tree=root))
        finally:
            await log.aclose()


def spawn_serve(args: list[str], log_file: Path, name: str) -> subprocess.Popen[str]:
    """``python -m halo_actors serve ARGS`` in its own process group, stderr appended to
    ``log_file``; returns once it printed its listening line (within START_BUDGET),
    else kills its group and fails naming ``name``."""
    command = [sys.executable, "-m", "halo_actors", "serve", *args]
    with open(log_file, "a") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
        )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_BUDGET)
    line = process.stdout.readline() if ready else ""  # serve prints one line once it listens
    if "listening on" not in line:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()
        raise AssertionError(f"{name} did not start within {START_BUDGET} s: {line!r}")
    return process
