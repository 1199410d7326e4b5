"""The stream plans behind ``/chat``, ``/subscribe`` and the slash commands.

Every plan registers its log subscription (the listener) in ``open`` **before** it
sends a message or checks idleness, so nothing that happens after the check can be
missed; the subscription lives in the response's exit stack, so it is released on
every exit. Frame ids come from the log (``frames``); resuming after an id replays
exactly what followed it (the subscription's catch-up), with the ``MEDIA:`` line
filter rebuilt as it stood at that id, and knowing whether a run had just ended
there (:func:`stream_state_at`): the ``agent_done`` that follows a run's terminal
``complete`` is not the end of another run, so a client resuming right after a
``complete`` gets the next run, not a second ``complete`` for the one it saw.

Idleness (``/subscribe``, ``running`` in history): a session is idle when it is not
running and not compacting. A run with no turn open (a manual compaction, a run
about to open its round) is busy: it still ends with ``agent_done``, which a stream
shows as its terminal ``complete``. A run's terminal ``complete`` and its
``agent_done`` are one append that also ends the run, so no run is still "running"
once its ``complete`` is out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import trio

from ...core.access import Access
from ...core.errors import SubscriptionClosed
from ...core.events import AgentDone, TextStreamed, TurnCompleted
from ...core.log import EventFilter, EventLog, Subscription
from ...runtime.supervisor import Supervisor
from .frames import (
    Frame,
    MediaFilter,
    Projector,
    Resume,
    complete_frame,
    queued_frame,
    session_frame,
)
from .remote import LogView, SessionReader

REPLAY_PAGE = 200
"""Records an idle replay reads at a time; it stops at the first terminal ``complete``."""


def is_busy(sup: SessionReader, session_id: str) -> bool:
    """Running (a run exists, whatever it is doing) or compacting."""
    if not sup.exists(session_id):
        return False
    state = sup.state(session_id)
    return state.turn_open or state.is_compacting or sup.is_running(session_id)


@dataclass
class StreamState:
    """How a stream of one session stood right after some seq (what a resume starts from)."""

    media: MediaFilter = field(default_factory=MediaFilter)
    after_terminal: bool = False
    """The session's last run-closing record up to there was a terminal ``complete``:
    that run's ``agent_done`` (next) is not a new end of a run."""

    def projector(self, skip: Resume | None = None) -> Projector:
        projector = Projector(media=self.media, skip=skip)
        projector.after_terminal = self.after_terminal
        return projector


_STATE_KINDS = frozenset({"stream", "complete", "agent_done"})


async def stream_state_at(sup: SessionReader, session_id: str, seq: int) -> StreamState:
    """The ``MEDIA:`` line filter, and whether a run had just ended, right after ``seq``."""
    state = StreamState()
    if not sup.exists(session_id):
        return state
    seq = min(seq, sup.log.last_seq)  # the UI rows past the durable horizon are not shown
    start = next(
        (
            u.seq
            for u in reversed(sup.state(session_id).ui)
            if u.kind == "user" and 0 < u.seq <= seq
        ),
        None,
    )
    if start is None:
        return state
    flt = EventFilter(session_id=session_id, kinds=_STATE_KINDS)
    for record in await sup.log.read(flt, after_seq=start, until_seq=seq):
        match record.event:
            case TextStreamed(text=text):
                state.media.feed(text)
            case TurnCompleted(batch_boundary=boundary):
                state.media = MediaFilter()
                state.after_terminal = not boundary
            case AgentDone():
                state.after_terminal = False
    return state


async def media_state_at(sup: SessionReader, session_id: str, seq: int) -> MediaFilter:
    """The ``MEDIA:`` filter as a stream of this session stood right after ``seq``."""
    return (await stream_state_at(sup, session_id, seq)).media


async def subscribe(
    stack: AsyncExitStack, log: EventLog, session_id: str, after_seq: int | None, buffer: int
) -> Subscription:
    """Register the listener now (no checkpoint between registration and the horizon)."""
    cursor = log.last_seq if after_seq is None else after_seq
    flt = EventFilter(session_id=session_id)
    return await stack.enter_async_context(log.subscribe(flt, cursor, buffer_size=buffer))


async def pump_subscription(
    sub: Subscription,
    projector: Projector,
    out: trio.MemorySendChannel[Frame],
    after: int = 0,
) -> None:
    """Frames from the live subscription until the projector is done; records up to
    ``after`` (the stream's start, when it is later than the listener's) are not shown.

    An overflow (or the log closing) ends the stream without a ``complete``: the
    client resumes with ``Last-Event-ID`` and misses nothing.
    """
    try:
        async for record in sub:
            if record.seq <= after:
                continue
            for frame in projector.project(record):
                await out.send(frame)
            if projector.done:
                return
    except SubscriptionClosed:  # SubscriptionOverflow included
        return


@dataclass
class FixedPlan:
    """A stream whose frames are all known when it opens (slash commands, ``queued``)."""

    make: Callable[[AsyncExitStack], Awaitable[list[Frame]]]

    async def open(self, stack: AsyncExitStack) -> list[Frame]:
        return await self.make(stack)

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        return None


@dataclass
class ChatPlan:
    """Send a message; stream its run to the terminal ``complete``, or answer ``queued``.

    A message that starts a run is that run's first record: the stream starts right
    before it (its ``session`` frame's id is the message's seq - 1), whatever the
    listener registered before. Records of the session logged in between belong to the
    run before it, whose end may be in the session's state before it is durable (and
    published to the listener); its ``complete`` would end this stream before this
    run showed. A message forwarded to the node that owns its tree is placed the same
    way: the owner's outcome carries its seq (one shared log).
    """

    sup: Supervisor
    session_id: str
    message: str
    images: tuple[str, ...]
    agent_id: str | None
    buffer: int
    access: Access
    """The caller's token level: a session this chat creates gets it for life."""
    _sub: Subscription | None = field(default=None, init=False)
    _projector: Projector = field(default_factory=Projector, init=False)
    _after: int = field(default=0, init=False)

    async def open(self, stack: AsyncExitStack) -> list[Frame]:
        sub = await subscribe(stack, self.sup.log, self.session_id, None, self.buffer)
        if not self.sup.exists(self.session_id) and await self.sup.here(self.session_id):
            await self.sup.create_session(
                self.session_id, agent_id=self.agent_id or "default", access=self.access
            )
        delivery, seq = await self.sup.send_logged(
            self.session_id, self.message, images=self.images
        )
        if delivery == "queued":
            return [session_frame(sub.cursor, self.session_id), queued_frame(sub.cursor)]
        self._after = max(sub.cursor, seq - 1)
        self._sub = sub
        return [session_frame(self._after, self.session_id)]

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        if self._sub is not None:
            await pump_subscription(self._sub, self._projector, out, self._after)


@dataclass
class SubscribePlan:
    """Reattach to a session: stream to the terminal ``complete``, or one ``complete`` if idle.

    ``resume`` (``Last-Event-ID``) makes it a resume: its ``session`` frame carries the
    resume id itself (for a part id ``N.k`` the log cursor stands at ``N-1``, and an id
    ``N-1`` would make a client cut right after that frame see ``N.k`` twice); the
    frames after that id come first, straight from the log; an idle session then ends at the first terminal
    ``complete`` among them, or with one ``complete`` when they hold none. The same
    holds without a resume id for a run that ended between the listener's
    registration and the idle check: its frames come from the log, to its ``complete``.
    """

    sup: Supervisor
    session_id: str
    resume: Resume | None
    buffer: int
    remote: bool = False
    """Another node owns the session's tree: its state comes from the log (``LogView``),
    loaded once the listener is registered."""
    _sub: Subscription | None = field(default=None, init=False)
    _projector: Projector = field(default_factory=Projector, init=False)
    _idle_until: int | None = field(default=None, init=False)

    async def open(self, stack: AsyncExitStack) -> list[Frame]:
        after = None if self.resume is None else self.resume.after_seq
        sub = await subscribe(stack, self.sup.log, self.session_id, after, self.buffer)
        self._sub = sub
        reader: SessionReader = self.sup
        if self.remote:
            reader = await LogView.load(self.sup, self.session_id)
        state = await stream_state_at(reader, self.session_id, sub.cursor)
        self._projector = state.projector(self.resume)
        if not is_busy(reader, self.session_id):
            # Everything this session logged up to now (its state may run ahead of the
            # durable log: wait for it), so a run that ended after the listener registered
            # is replayed to its own ``complete``, never cut short by an invented one.
            until = max(self.sup.log.last_seq, reader.state(self.session_id).last_seq)
            await self.sup.log.wait_durable(until)
            self._idle_until = until
        opening = session_frame(sub.cursor, self.session_id)
        if self.resume is not None:  # its id names what the client has: the resume id itself
            opening = opening._replace(seq=self.resume.seq, part=self.resume.part)
        return [opening]

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        assert self._sub is not None, "open() runs first"
        if self._idle_until is None:
            await pump_subscription(self._sub, self._projector, out)
            return
        after, until = self._sub.cursor, self._idle_until
        flt = EventFilter(session_id=self.session_id)
        while after < until:  # page by page: a client far behind gets one run per answer
            page = await self.sup.log.read(flt, after_seq=after, until_seq=until, limit=REPLAY_PAGE)
            for record in page:
                for frame in self._projector.project(record):
                    await out.send(frame)
                if self._projector.done:
                    return
            if len(page) < REPLAY_PAGE:
                break
            after = page[-1].seq
        # Never below the resume id: a node whose log lags the node the client came from
        # (other trees' commits not tailed yet) still knows this session to its end (it
        # writes it, or its view caught up first), so nothing lies in between for it.
        await out.send(complete_frame(max(until, self._sub.cursor)))


@dataclass
class RunPlan:
    """Follow a run started by a command (``/compact``) to its end.

    ``start`` claims the run and returns with no checkpoint after that (so nothing of
    the run is logged yet): the stream starts at the session's last record then, as a
    chat's starts at its message (:class:`ChatPlan`), not at the end of the run before.
    """

    sup: Supervisor
    session_id: str
    start: Callable[[], Awaitable[str]]
    buffer: int
    _sub: Subscription | None = field(default=None, init=False)
    _after: int = field(default=0, init=False)

    async def open(self, stack: AsyncExitStack) -> list[Frame]:
        sub = await subscribe(stack, self.sup.log, self.session_id, None, self.buffer)
        if await self.start() == "queued":
            return [session_frame(sub.cursor, self.session_id), queued_frame(sub.cursor)]
        self._after = max(sub.cursor, self.sup.state(self.session_id).last_seq)
        await self.sup.log.wait_durable(self._after)  # an id a client gets is durable
        self._sub = sub
        return [session_frame(self._after, self.session_id)]

    async def pump(self, out: trio.MemorySendChannel[Frame]) -> None:
        if self._sub is not None:
            await pump_subscription(self._sub, Projector(), out, self._after)
