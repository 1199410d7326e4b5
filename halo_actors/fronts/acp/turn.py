"""One ``session/prompt`` turn: chat, follow a queued or dropped stream, settle, cancel.

Lifecycle (``docs/acp.md``, decisions in ``docs/design/acp.md``):

- chat streams until the terminal ``complete`` → ``end_turn``; an ``error``
  frame → ``[error] …`` then ``end_turn``;
- ``queued`` → follow the running session with ``/subscribe`` at once, from the
  ``queued`` frame's id, forwarding only from the round that carries this
  prompt, to the terminal ``complete``; then settle;
- a stream that ends with neither ``complete`` nor a cancel re-attaches after a
  backoff (:data:`BACKOFF`), resuming after the last frame seen
  (``Last-Event-ID``); an attempt that delivers any frame besides ``session``
  resets the budget; after 5 failures in a row → ``[adapter error] connection
  lost``, ``end_turn``; once re-attached to ``complete``, settle against history;
- chat failing before its first frame → ``[adapter error] <message>``, ``end_turn``;
- cancel: ``/stop`` fires without being awaited for the latched session (at once
  when the ``session`` frame has been seen, else as soon as it arrives or the
  chat request ends); the stream is read on until ``complete`` for at most
  :data:`CANCEL_GRACE` seconds; a cancel during a backoff or a settle resolves
  at once; the prompt resolves ``cancelled``;
- abandon (the client closed stdin): the turn ends at once, the server's turn
  goes on, like a web client that disconnects.

Invariant: every wait the turn makes sits in a cancel scope that ``cancel``
can reach (the read scope gets a deadline, the wait scope is cancelled), and
each phase checks ``_cancelled`` before entering its scope, with no
checkpoint between, so no cancel is missed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Literal

import trio

from halo_actors.core.logger import get_logger

from .client import Frame, HaloClient, ServerError
from .settle import SKEW_MARGIN_MS, logged_reply, missing_text
from .updates import Update, UpdateBuilder, text_chunk

log = get_logger("halo_actors.acp")
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0)
"""Seconds before each re-attach of a dropped stream; its length is the failure budget."""
CANCEL_GRACE = 5.0
"""Seconds a cancelled prompt keeps reading for the stop's own frames and ``complete``."""
Outcome = Literal["complete", "queued", "dropped", "error", "cancelled"]
StopReason = Literal["end_turn", "cancelled"]
Send = Callable[[Update], Awaitable[None]]
Stream = AbstractAsyncContextManager[AsyncIterator[Frame]]


def backoff_from(first: float) -> tuple[float, ...]:
    """The re-attach schedule starting at ``first`` seconds: ``first × (1, 2, 4, 8, 16)``."""
    return tuple(first * factor for factor in (1, 2, 4, 8, 16))


class PromptTurn:
    def __init__(
        self,
        client: HaloClient,
        session_id: str,
        message: str,
        images: list[str],
        send: Send,
        nursery: trio.Nursery,
        backoff: tuple[float, ...] = BACKOFF,
    ) -> None:
        self._client = client
        self._message = message
        self._images = images
        self._send = send
        self._nursery = nursery
        """The adapter's: ``/stop`` runs there, unawaited."""
        self._backoff = backoff
        self.latched = session_id
        """The session the stream is about; the ``session`` frame overrides it."""
        self._latched_seen = False
        self._stop_pending = False
        """Cancelled before the ``session`` frame: the stop fires when the id is known."""
        self._builder = UpdateBuilder()
        self._streamed: list[str] = []
        self._last_event_id: str | None = None
        self._delivered = 0
        """Frames received other than ``session``: a re-attach that raises it resets the budget."""
        self._seen_own_round = False
        self._started_ms = int(time.time() * 1000)
        self._cancelled = False
        self._read_scope: trio.CancelScope | None = None
        self._wait_scope: trio.CancelScope | None = None
        self._outer_scope: trio.CancelScope | None = None
        self._in_chat = False

    def cancel(self) -> None:
        """``session/cancel``: stop the server side, bound the read, cut any backoff or settle."""
        if self._cancelled:
            return
        self._cancelled = True
        if self._in_chat and not self._latched_seen:
            self._stop_pending = True
        else:
            self._fire_stop()
        if self._read_scope is not None:
            self._read_scope.deadline = min(
                self._read_scope.deadline, trio.current_time() + CANCEL_GRACE
            )
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    def abandon(self) -> None:
        """The client has gone: end now, leave the server's turn running."""
        self._cancelled = True
        if self._outer_scope is not None:
            self._outer_scope.cancel()

    def _fire_stop(self) -> None:
        self._stop_pending = False
        self._nursery.start_soon(self._stop, self.latched)

    async def _stop(self, session_id: str) -> None:
        try:
            await self._client.stop(session_id)
        except ServerError as exc:
            log.warning("acp_stop_failed", session_id=session_id, error=str(exc))

    async def run(self) -> StopReason:
        with trio.CancelScope() as outer:
            self._outer_scope = outer
            if self._cancelled:
                outer.cancel()
            return await self._run()
        return "cancelled"

    async def _run(self) -> StopReason:
        outcome = await self._chat()
        if outcome is None:
            return "end_turn"
        if self._cancelled:
            return "cancelled"
        if outcome in ("complete", "error"):
            return "end_turn"
        followed = await self._follow(queued=outcome == "queued")
        if self._cancelled:
            return "cancelled"
        if followed:
            await self._settle()
        return "cancelled" if self._cancelled else "end_turn"

    async def _chat(self) -> Outcome | None:
        """The chat stream's outcome; None when it failed before its first frame (said so)."""
        self._in_chat = True
        try:
            chat = self._client.chat(self.latched, self._message, self._images)
            return await self._consume(chat, forward=True)
        except ServerError as exc:
            if self._last_event_id is None and not self._cancelled:
                await self._say(f"[adapter error] {exc}")
                return None
            log.warning("acp_stream_dropped", session_id=self.latched, error=str(exc))
            return "dropped"
        finally:
            self._in_chat = False
            if self._stop_pending:
                self._fire_stop()

    async def _consume(self, stream: Stream, *, forward: bool) -> Outcome:
        """Open ``stream`` and read it to its outcome; a cancel bounds both steps."""
        with trio.CancelScope() as scope:
            if self._cancelled:
                scope.deadline = trio.current_time() + CANCEL_GRACE
            self._read_scope = scope
            try:
                async with stream as frames:
                    return await self._read(frames, forward)
            finally:
                self._read_scope = None
        return "cancelled"  # the grace ran out

    async def _read(self, frames: AsyncIterator[Frame], forward: bool) -> Outcome:
        async for frame in frames:
            if frame.event_id is not None:
                self._last_event_id = frame.event_id
            kind = frame.type
            if kind == "session":
                self._latch(frame.data.get("sessionId"))
                continue
            self._delivered += 1
            if kind == "queued":
                return "queued"
            if kind == "complete":
                return "complete"
            if kind == "user" and not forward:
                forward = self._seen_own_round = self._message in str(frame.data.get("text"))
            elif forward:
                await self._forward(frame)
                if kind == "error":
                    return "error"
        return "dropped"

    def _latch(self, session_id: object) -> None:
        if isinstance(session_id, str) and session_id:
            self.latched = session_id
        self._latched_seen = True
        if self._stop_pending:
            self._fire_stop()

    async def _forward(self, frame: Frame) -> None:
        if frame.type == "stream":
            self._streamed.append(str(frame.data.get("text", "")))
        for update in self._builder.live(frame.data):
            await self._send(update)

    async def _say(self, text: str) -> None:
        await self._send(text_chunk("agent_message_chunk", text))

    async def _follow(self, *, queued: bool) -> bool:
        """Re-attach until ``complete``; False when the budget ran out, an error or a cancel.

        A queued prompt attaches at once; a dropped stream waits its backoff first.
        """
        failures = 0
        wait_first = not queued
        forward = not queued
        while not self._cancelled:
            if wait_first:
                if failures == len(self._backoff):
                    await self._say("[adapter error] connection lost")
                    return False
                await self._pause(self._backoff[failures])
                if self._cancelled:
                    return False
            wait_first = True
            delivered = self._delivered
            try:
                subscribe = self._client.subscribe(self.latched, self._last_event_id)
                outcome = await self._consume(subscribe, forward=forward)
            except ServerError as exc:
                log.warning("acp_reattach_failed", session_id=self.latched, error=str(exc))
                outcome = "dropped"
            if outcome in ("complete", "error", "cancelled"):
                return outcome == "complete"
            forward = forward or self._seen_own_round
            failures = 0 if self._delivered > delivered else failures + 1
        return False

    async def _pause(self, seconds: float) -> None:
        with trio.CancelScope() as scope:
            if self._cancelled:
                scope.cancel()
            self._wait_scope = scope
            try:
                await trio.sleep(seconds)
            finally:
                self._wait_scope = None

    async def _settle(self) -> None:
        """Send what the client still lacks of the logged reply (nothing when cancelled)."""
        with trio.CancelScope() as scope:
            if self._cancelled:
                scope.cancel()
            self._wait_scope = scope
            try:
                since = self._started_ms - SKEW_MARGIN_MS
                body = await self._client.history(self.latched, since=since)
            except ServerError as exc:
                log.warning("acp_settle_failed", session_id=self.latched, error=str(exc))
                return
            finally:
                self._wait_scope = None
            rows = body.get("messages")
            logged = logged_reply(rows if isinstance(rows, list) else [], self._message)
            tail = missing_text(logged, "".join(self._streamed))
            if tail:
                await self._say(tail)
