"""Run the adapter on a pair of byte streams, or on this process's stdin/stdout.

stdout carries protocol lines only: :func:`serve_stdio` keeps a private copy of
file descriptor 1 for them and points fd 1 (and so ``print`` and any stray
library output) at stderr. Pipes, sockets and terminals are read and written
by trio directly; regular files and devices (``< requests.jsonl``) through a
worker thread, since they cannot be polled.

The adapter ends when its input ends: prompts in flight are abandoned (their
server turns go on), other requests get :data:`~.jsonrpc.EOF_GRACE` seconds to
answer, and stops already fired :data:`STOP_GRACE` seconds to land.
"""

from __future__ import annotations

import os
import stat

import trio

from .adapter import Adapter
from .client import HaloClient
from .jsonrpc import JsonRpcPeer
from .turn import BACKOFF

STOP_GRACE = 3.0


async def run_adapter(
    client: HaloClient,
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
    backoff: tuple[float, ...] = BACKOFF,
) -> None:
    try:
        async with trio.open_nursery() as nursery:
            adapter = Adapter(client, nursery, backoff)
            peer = JsonRpcPeer(
                receive,
                send,
                adapter.handlers(),
                {"session/cancel": adapter.cancel},
                on_eof=adapter.abandon_all,
            )
            adapter.peer = peer
            await peer.serve()
            nursery.cancel_scope.deadline = trio.current_time() + STOP_GRACE
    finally:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
            await client.aclose()


async def serve_stdio(client: HaloClient, backoff: tuple[float, ...] = BACKOFF) -> None:
    stdin, stdout = _stream(os.dup(0)), _stream(os.dup(1))
    os.dup2(2, 1)
    async with stdin, stdout:
        await run_adapter(client, stdin, stdout, backoff)


def _stream(fd: int) -> trio.lowlevel.FdStream | _ThreadedFd:
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return trio.lowlevel.FdStream(fd)
    return _ThreadedFd(fd)


class _ThreadedFd(trio.abc.HalfCloseableStream):
    """Blocking reads and writes in a worker thread, one at a time (files, devices)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = trio.Lock()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        async with self._lock:
            return await trio.to_thread.run_sync(os.read, self._fd, max_bytes or 65536)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._lock:
            view = memoryview(data)
            while view:
                written = await trio.to_thread.run_sync(os.write, self._fd, view)
                view = view[written:]

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        os.close(self._fd)
        await trio.lowlevel.checkpoint()
