"""Run the HTTP front: hypercorn's trio worker (HTTP/1.1 only, ``http1``) inside a nursery we own.

:func:`open_server` is the one entry point (the CLI's ``serve``, the tests and the
benchmark all use it). Shutdown, in order, when the block exits:

1. ``front.draining`` is set: every SSE stream ends cleanly (final chunk sent) and
   every WebSocket closes with 1001, releasing their listeners;
2. hypercorn's shutdown trigger fires: it stops accepting, closes idle
   keep-alive connections and waits up to ``graceful_timeout`` for requests in
   flight;
3. every workspace runtime closes (running turns get their terminal events).

No task outlives the block and the listening socket is closed when it returns.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio
from hypercorn.config import Config, Sockets

from ...core.logger import get_logger
from .app import Front, FrontSettings, build_app
from .http1 import serve
from .runtimes import Runtimes

log = get_logger("halo_actors.http")


@dataclass
class RunningServer:
    front: Front
    binds: list[str]
    """What hypercorn listens on, e.g. ``["http://127.0.0.1:9527"]``."""

    @property
    def url(self) -> str:
        return self.binds[0]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


class _Config(Config):
    """Hypercorn's config, with ``TCP_USER_TIMEOUT`` set on the listening sockets.

    Accepted sockets inherit it: the kernel aborts a connection whose sent data stays
    unacknowledged that long, zero-window probes included (a client that stopped
    reading). Hypercorn shields its socket writes from cancellation, so this is the
    only way such a write ever ends.
    """

    send_timeout: float = 30.0

    def create_sockets(self) -> Sockets:
        sockets = super().create_sockets()
        option = getattr(socket, "TCP_USER_TIMEOUT", None)
        for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
            if option is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, option, max(1, int(self.send_timeout * 1000)))
        return sockets


def hypercorn_config(
    host: str, port: int, *, graceful_timeout: float = 3.0, send_timeout: float = 30.0
) -> Config:
    config = _Config()
    config.send_timeout = send_timeout
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # its "Running on …" line is ours to print (quiet when embedded)
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    config.backlog = 1024  # hypercorn's 100 drops SYNs when hundreds of SSE clients attach at once
    return config


@asynccontextmanager
async def open_server(
    settings: FrontSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    workspaces: tuple[str | Path, ...] = (),
    graceful_timeout: float = 3.0,
) -> AsyncIterator[RunningServer]:
    """Serve until the block exits; ``workspaces`` are opened up front (others on demand)."""
    async with trio.open_nursery() as runtime_nursery:
        runtimes = Runtimes(
            runtime_nursery,
            model=settings.model,
            hidden=lambda: front.hidden_paths(),
            tools=settings.tools,
            cluster=settings.cluster,
            resident_idle=settings.resident_idle,
        )
        front = Front(settings, runtimes)
        try:
            for workspace in workspaces:
                await runtimes.get(await trio.to_thread.run_sync(os.path.realpath, workspace))
            async with trio.open_nursery() as server_nursery:
                stop = trio.Event()

                async def shutdown_trigger() -> None:
                    await stop.wait()

                config = hypercorn_config(
                    host,
                    port,
                    graceful_timeout=graceful_timeout,
                    send_timeout=settings.send_timeout,
                )
                app = build_app(front)
                binds: list[str] = await server_nursery.start(
                    partial(serve, app, config, shutdown_trigger=shutdown_trigger)
                )
                server_nursery.start_soon(front.tokens.watch, front.draining)
                log.info("http_listening", binds=binds)
                try:
                    yield RunningServer(front, binds)
                finally:
                    front.draining.set()
                    stop.set()
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
                await runtimes.aclose()


async def serve_until_signalled(
    settings: FrontSettings, *, host: str, port: int, workspaces: tuple[str | Path, ...]
) -> None:
    """The CLI's ``serve``: run until SIGINT or SIGTERM, then shut down cleanly."""
    import signal

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_server(settings, host=host, port=port, workspaces=workspaces) as server:
            print(f"halo_actors http front listening on {server.url}", flush=True)
            async for signum in signals:
                log.info("http_shutdown", signal=signal.Signals(signum).name)
                break
