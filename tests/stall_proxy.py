"""A TCP proxy on loopback that can stall: the server behind it seems to stop answering.

``pause()`` stops forwarding bytes in both directions while every connection stays
open (as a server process under SIGSTOP looks from the client: the kernel keeps the
connection, nothing answers); ``resume()`` forwards what waited. ``drop_all()`` closes
every connection through it, as a server restart does (new ones are served). Used to
check that a client never waits forever on a server that stopped answering, and
recovers from one that restarted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

CHUNK = 65_536


class StallProxy:
    def __init__(self, port: int) -> None:
        self.port = port
        self._flowing = trio.Event()
        self._flowing.set()
        self._connections: set[trio.CancelScope] = set()

    def pause(self) -> None:
        if self._flowing.is_set():
            self._flowing = trio.Event()

    def resume(self) -> None:
        self._flowing.set()

    def drop_all(self) -> None:
        for scope in self._connections:
            scope.cancel()

    async def _pipe(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(CHUNK):
                await self._flowing.wait()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await sink.aclose()  # one side ended: so does the other direction

    async def _serve(self, client: trio.SocketStream, target: tuple[str, int]) -> None:
        with trio.CancelScope() as scope:
            self._connections.add(scope)
            try:
                async with client:
                    upstream = await trio.open_tcp_stream(*target)
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pipe, client, upstream)
                        nursery.start_soon(self._pipe, upstream, client)
            except OSError:
                return
            finally:
                self._connections.discard(scope)


@asynccontextmanager
async def stall_proxy(target: tuple[str, int]) -> AsyncIterator[StallProxy]:
    """A proxy to ``target`` on 127.0.0.1 (a free port); closed, with every connection
    through it, when the block ends."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    proxy = StallProxy(listeners[0].socket.getsockname()[1])
    async with trio.open_nursery() as nursery:

        async def handler(stream: trio.SocketStream) -> None:
            await proxy._serve(stream, target)

        nursery.start_soon(trio.serve_listeners, handler, listeners)
        try:
            yield proxy
        finally:
            proxy.resume()
            nursery.cancel_scope.cancel()
