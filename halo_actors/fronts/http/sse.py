"""The SSE response: a raw ASGI response that runs one :class:`StreamPlan`.

Why not sse-starlette: its shutdown watcher is asyncio-only, and under trio
``request.is_disconnected()`` always answers False. So this response races the
stream against ``http.disconnect`` from ``receive()`` and against the server's
``draining`` event in one nursery, like Starlette's own StreamingResponse.

Lifecycle of one response:

1. ``plan.open(stack)`` registers the listener (into ``stack``) and does whatever
   must happen before the first byte (send the message, check idleness). A
   ``HaloError`` or ``ApiError`` raised here becomes a JSON error answer instead of
   a stream. The work in ``open`` is shielded: a disconnect cannot split "message
   logged" from "run started".
2. Headers, then ``retry:`` (:data:`RETRY_MS`) and the plan's first frames, then ``plan.pump(channel)`` feeding a
   bounded channel (:data:`FRAME_BUFFER` frames; when it is full the pump waits,
   and the log's own bounded subscriber buffer then overflows, which closes the
   stream: events are never skipped) while the writer coalesces whatever is ready
   (waiting up to ``coalesce`` seconds for more, when set) into one write, and sends
   ``: keepalive`` after ``keepalive`` idle seconds.
3. Every exit (error, end of plan, disconnect, draining, the token's revocation)
   leaves ``stack``, which releases the listener. A disconnect never reaches the runtime: the turn goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Protocol

import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ...core.errors import HaloError
from ...core.logger import get_logger
from .errors import ApiError, error_response
from .frames import Frame, encode_sse

log = get_logger("halo_actors.http")

FRAME_BUFFER = 256
"""Frames between the pump and the writer; a full buffer makes the pump wait."""
COALESCE = 512
"""Most frames one write carries."""
KEEPALIVE = b": keepalive\n\n"
RETRY_MS = 1000
"""How long a browser waits before it reconnects a dropped stream (its default is 3 s)."""
RETRY = b"retry: %d\n\n" % RETRY_MS
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
"""No content-length: the body is chunked and ends with the stream."""


class StreamPlan(Protocol):
    """What a streaming route does; see the module docstring for the order of calls."""

    async def open(self, stack: AsyncExitStack) -> list[Frame]: ...

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        """Send frames until the stream is over, then return (the caller closes ``out``)."""
        ...


class EventStream(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        plan: StreamPlan,
        *,
        keepalive: float,
        draining: trio.Event,
        coalesce: float = 0.0,
        on_close: Callable[[], None] | None = None,
        revoked: trio.Event | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = list(SSE_HEADERS)
        self.plan = plan
        self.keepalive = keepalive
        self.coalesce = coalesce
        self.draining = draining
        self.revoked = revoked
        """Set when the caller's token is revoked: the stream ends like on draining."""
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            refused: ApiError | HaloError | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(_cancel_on_event, self.draining, nursery.cancel_scope)
                if self.revoked is not None:
                    nursery.start_soon(_cancel_on_event, self.revoked, nursery.cancel_scope)
                refused = await self._respond(send)
                nursery.cancel_scope.cancel()
            if refused is not None:
                # Outside the race: hypercorn ends (or closes) the connection inside the
                # send of the answer's last byte, and delivers ``http.disconnect`` from
                # inside that very send; a cancel there left the connection open.
                await error_response(refused)(scope, receive, send)
        finally:
            if self.on_close is not None:
                self.on_close()

    async def _respond(self, send: Send) -> ApiError | HaloError | None:
        """Stream the plan, or return the error that refused it before the first byte.

        The listener is released before the last byte goes out, on every path.
        """
        refused: ApiError | HaloError | None = None
        started = False
        try:
            async with AsyncExitStack() as stack:
                try:
                    with trio.CancelScope(shield=True):
                        first = await self.plan.open(stack)
                except (ApiError, HaloError) as exc:
                    refused = exc
                else:
                    start = {"type": "http.response.start", "status": 200}
                    await send({**start, "headers": self.raw_headers})
                    started = True
                    await self._body(first, send)
        finally:
            if started:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        return refused

    async def _body(self, first: list[Frame], send: Send) -> None:
        await _write(send, RETRY + b"".join(map(encode_sse, first)))
        frames_in, frames_out = trio.open_memory_channel[Frame](FRAME_BUFFER)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_pump, frames_in)
            await self._write_loop(frames_out, send)

    async def _run_pump(self, frames_in: trio.MemorySendChannel[Frame]) -> None:
        async with frames_in:
            await self.plan.pump(frames_in)

    async def _write_loop(self, frames: trio.MemoryReceiveChannel[Frame], send: Send) -> None:
        while True:
            with trio.move_on_after(self.keepalive) as idle:
                try:
                    frame = await frames.receive()
                except trio.EndOfChannel:
                    return
            if idle.cancelled_caught:
                await _write(send, KEEPALIVE)
                continue
            chunk = await self._gather([encode_sse(frame)], frames)
            await _write(send, b"".join(chunk))

    async def _gather(
        self, chunk: list[bytes], frames: trio.MemoryReceiveChannel[Frame]
    ) -> list[bytes]:
        """Add whatever else is ready, waiting up to ``coalesce`` seconds for more."""
        deadline = trio.current_time() + self.coalesce
        while len(chunk) < COALESCE:
            try:
                chunk.append(encode_sse(frames.receive_nowait()))
                continue
            except trio.EndOfChannel:
                break
            except trio.WouldBlock:
                if self.coalesce <= 0:
                    break
            with trio.move_on_at(deadline):
                try:
                    chunk.append(encode_sse(await frames.receive()))
                    continue
                except trio.EndOfChannel:
                    pass
            break
        return chunk


async def _write(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _cancel_on_event(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
