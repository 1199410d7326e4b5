"""The event-log protocol and the part every backend shares.

:class:`LogBase` validates, encodes, stamps (sequence number, server time),
publishes, and keeps the durability horizon; a backend only persists and reads.
See ``docs/design/event-log.md``.

Invariants:
- sequence numbers strictly increase across the log's whole life and are never
  reused for a record anyone could have seen; a backend restarts from the largest
  stored seq, so the seqs of a suffix lost to a failure (never durable, so never
  seen) are handed out again;
- timestamps (ms) never decrease along the sequence;
- **durable is a prefix**: records become durable in sequence order, so every
  record with ``seq <= last_seq`` is durable and stays; ``last_seq`` never passes
  a record that is not;
- records are published to subscribers only once durable, and in sequence order:
  no reader of the log ever sees a record that is not durable;
- **fail-stop**: after a failed commit nothing more is made durable: every later
  append (and every wait for a seq past ``last_seq``) raises ``StoreFailed``;
- a *pipelined* backend stamps in ``append_nowait`` (no waiting: the caller may
  act on the records at once and waits for durability only where it is
  observable, with ``wait_durable``); ``append`` either raises before anything is
  queued (bad input, closed or failed log) or returns once its records are
  durable, and cannot be cancelled in between.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import trio

from ..errors import EventTooLarge, InvalidInput, StoreClosed, StoreFailed
from ..events import FRAME_ONLY_TYPES, Event, Record, kind_of
from ..events import encode_record as _encode
from ..ids import check_session_id
from .fanout import FanOut, Subscription
from .filter import EVERYTHING, EventFilter
from .index import SessionSummary, fold_index

DEFAULT_MAX_EVENT_BYTES = 1 << 20
DEFAULT_SUBSCRIBER_BUFFER = 4_096
MAX_BACKLOG = 10_000
"""Records stamped past the durable horizon at which a pipelined log is ``backlogged``
(its producers wait for the writer: the bound of its commit queue, in effect)."""
SAFE_IDS_KEPT = 4_096
"""How many session ids a log remembers as checked (it checks each id it appends for)."""


class EventLog(Protocol):
    """What the runtime and the fronts need from a log; every backend passes one contract suite."""

    max_event_bytes: int
    """The largest encoded record the log stores; bigger ones raise ``EventTooLarge``."""

    pipelined: bool
    """True when :meth:`append_nowait` works: the backend stamps seqs itself, before the
    commit. A backend whose seqs come from the commit (one log shared by several nodes)
    is not pipelined; its callers use :meth:`append`, which waits for the commit."""

    backlogged: bool
    """More than ``MAX_BACKLOG`` records are stamped and not yet durable: a producer
    should wait for durability (:meth:`wait_durable`) before it stamps more."""

    @property
    def last_seq(self) -> int:
        """The durable horizon: the largest seq durable and published (0 for an empty log).
        Every record up to it is durable; readers bound themselves by it."""
        ...

    @property
    def stamped_seq(self) -> int:
        """The largest seq handed out, durable or still queued (``>= last_seq``)."""
        ...

    @property
    def failure(self) -> StoreFailed | None:
        """Why the log stopped making records durable (fail-stop), or None."""
        ...

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        """Stamp and store ``events`` for one session atomically; return once they are durable."""
        ...

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        """Stamp ``events`` and queue them for the next commit; never blocks (pipelined only).

        Raises before anything is stamped on bad input, a closed log or a failed one. The
        records are final (seq, ts) but not durable: nothing reads them from the log until
        ``last_seq`` reaches them, and a failure may still lose them (with every later one).
        """
        ...

    async def wait_durable(self, seq: int) -> None:
        """Until every record up to ``seq`` (a seq already stamped) is durable and published.

        Raises ``StoreFailed`` if the log failed first. Cancelling the wait loses nothing:
        the records stay queued.
        """
        ...

    async def wait_failed(self) -> StoreFailed:
        """Until the log fails (fail-stop); returns why. Waits forever on a healthy log."""
        ...

    def flush_alone(self, session_id: str) -> None:
        """A hint from a producer that is done for now (a run that just ended): if every
        record waiting for the next commit is ``session_id``'s, commit them now instead of
        after the rest of this scheduler pass (nothing else would share that commit).
        Changes when records become durable, never which or in what order."""
        ...

    async def catch_up(self) -> int:
        """Publish here every record committed so far by any writer of a shared log (a
        node's tail may not have delivered another node's last commits yet); returns
        ``last_seq``. A read that must see every acknowledged append, whichever node
        acknowledged it, calls this first. A log with one writer has nothing to do."""
        ...

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Stored records matching ``flt`` with ``after_seq < seq <= until_seq``, by seq."""
        ...

    def subscribe(
        self,
        flt: EventFilter = EVERYTHING,
        after_seq: int = 0,
        *,
        buffer_size: int = DEFAULT_SUBSCRIBER_BUFFER,
    ) -> AbstractAsyncContextManager[Subscription]:
        """Catch-up subscription: everything stored after ``after_seq``, then the live tail."""
        ...

    sync_reads: bool
    """True when :meth:`read_session_sync` works (a passivated session can then be rebuilt
    by a synchronous caller; see ``docs/design/passivation.md``)."""

    async def session_index(self, root: str | None = None) -> list[SessionSummary]:
        """Every session's summary (of the tree ``root`` only, if given), from the stored
        records: which exist, which were deleted, which a restart must recover at once."""
        ...

    def read_session_sync(self, session_id: str) -> list[Record]:
        """One session's stored records, by seq, read without yielding to trio (a blocking
        read for a synchronous caller; ``read`` is the one to use from async code)."""
        ...

    async def aclose(self) -> None: ...


class LogBase:
    """Validation, stamping, the durable horizon and fan-out.

    A pipelined subclass implements ``_enqueue`` (queue stamped records for its commit)
    and calls :meth:`_committed` (durable: publish) and :meth:`_fail_stop` (a commit
    failed) on the trio thread; ``append`` and ``wait_durable`` come from here (the
    memory log, durable as it stamps, overrides ``append_nowait`` instead). A
    subclass that is not pipelined overrides ``append`` and keeps ``pipelined = False``.
    Every subclass implements ``read``.
    """

    pipelined = True
    sync_reads = False

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._fanout = FanOut()
        self._next_seq = 1
        self._last_ts = 0
        self._published_seq = 0
        self.backlogged = False
        self._closed = False
        self._failure: StoreFailed | None = None
        self._durable = trio.Event()
        """Set (and replaced) when ``last_seq`` moves while someone waits, or the log fails."""
        self._durable_waiters = 0
        self._failed = trio.Event()
        self._safe_ids: set[str] = set()
        """Session ids found safe (bounded: cleared at ``SAFE_IDS_KEPT``); a hit skips the check."""

    @property
    def last_seq(self) -> int:
        return self._published_seq

    @property
    def stamped_seq(self) -> int:
        return self._next_seq - 1

    @property
    def failure(self) -> StoreFailed | None:
        return self._failure

    @property
    def subscriber_count(self) -> int:
        return self._fanout.count()

    def _resume_from(self, last_seq: int, last_ts: int) -> None:
        self._next_seq = last_seq + 1
        self._published_seq = last_seq
        self._last_ts = last_ts

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the event log is closed")

    def _check_healthy(self) -> None:
        if self._failure is not None:
            raise StoreFailed(str(self._failure))

    # --- appending ---------------------------------------------------------------------

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        self._check_healthy()
        records, bodies = self._stamp(session_id, events)
        self._enqueue(session_id, records, bodies)
        return records

    def _enqueue(self, session_id: str, records: list[Record], bodies: list[bytes]) -> None:
        """Queue stamped records for the next commit, in order; must not block."""
        raise NotImplementedError

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        records = self.append_nowait(session_id, *events)
        with trio.CancelScope(shield=True):
            await self.wait_durable(records[-1].seq)
        return records

    async def wait_durable(self, seq: int) -> None:
        if seq > self.stamped_seq:
            raise InvalidInput(f"seq {seq} was never stamped (the last is {self.stamped_seq})")
        if self._published_seq >= seq:
            await trio.lowlevel.checkpoint()
            return
        self._durable_waiters += 1
        try:
            while self._published_seq < seq:
                if self._failure is not None:
                    raise StoreFailed(str(self._failure))
                await self._durable.wait()
        finally:
            self._durable_waiters -= 1

    async def catch_up(self) -> int:
        await trio.lowlevel.checkpoint()
        return self._published_seq

    def flush_alone(self, session_id: str) -> None:
        """Nothing to do where appends are not grouped by scheduler pass."""

    async def wait_failed(self) -> StoreFailed:
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    def _committed(self, records: list[Record]) -> None:
        """On the trio thread, in seq order: these records are durable. Publish them and
        wake whoever waits for durability (one wake-up per committed batch)."""
        if records:
            self._published_seq = records[-1].seq
            self._fanout.publish(records)
        if self.backlogged:
            self.backlogged = self._next_seq - 1 - self._published_seq > MAX_BACKLOG
        if self._durable_waiters:
            self._durable.set()
            self._durable = trio.Event()

    def _fail_stop(self, cause: BaseException) -> None:
        """On the trio thread: a commit failed. Nothing after ``last_seq`` will ever be
        durable: fail every waiter and later append, end every subscription."""
        if self._failure is not None:
            return
        self._failure = StoreFailed(
            f"the event log stopped after a failed commit: {cause!r}; "
            f"durable up to seq {self._published_seq}"
        )
        self._fanout.close_all("the event log failed")
        self._durable.set()
        self._failed.set()

    def _stamp(self, session_id: str, events: Sequence[Event]) -> tuple[list[Record], list[bytes]]:
        """Validate and encode: the records and their bodies, in order; raises before any
        state changes on bad input."""
        if self._closed:
            raise StoreClosed("the event log is closed")
        if type(session_id) is not str or session_id not in self._safe_ids:
            check_session_id(session_id)  # raises on anything unsafe, a non-string too
            if type(session_id) is str:
                if len(self._safe_ids) >= SAFE_IDS_KEPT:
                    self._safe_ids.clear()
                self._safe_ids.add(session_id)
        if not events:
            raise InvalidInput("append needs at least one event")
        now = time.time_ns() // 1_000_000
        if now < self._last_ts:
            now = self._last_ts
        seq, cap = self._next_seq, self.max_event_bytes
        records, bodies = [], []
        for event in events:
            if type(event) in FRAME_ONLY_TYPES:
                raise InvalidInput(f"{kind_of(event)!r} frames are never stored")
            record = Record(seq=seq, session_id=session_id, ts=now, event=event)
            body = _encode(record)
            if len(body) > cap:
                raise EventTooLarge(
                    f"{kind_of(event)} event is {len(body)} bytes; the cap is {cap}"
                )
            records.append(record)
            bodies.append(body)
            seq += 1
        self._next_seq = seq
        self._last_ts = now
        if seq - 1 - self._published_seq > MAX_BACKLOG:
            self.backlogged = True
        return records, bodies

    @asynccontextmanager
    async def subscribe(
        self,
        flt: EventFilter = EVERYTHING,
        after_seq: int = 0,
        *,
        buffer_size: int = DEFAULT_SUBSCRIBER_BUFFER,
    ) -> AsyncIterator[Subscription]:
        self._check_open()
        subscription = Subscription(
            self._fanout, self._read_page, flt, after_seq, self._published_seq, buffer_size
        )
        try:
            yield subscription
        finally:
            subscription.close()

    async def _read_page(
        self, flt: EventFilter, after_seq: int, until_seq: int, limit: int
    ) -> list[Record]:
        return await self.read(flt, after_seq=after_seq, until_seq=until_seq, limit=limit)

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        raise NotImplementedError

    async def session_index(self, root: str | None = None) -> list[SessionSummary]:
        """The fold of every stored record (a full scan); a backend with an index of its
        own (SQLite's ``sessions`` table) overrides this."""
        flt = EVERYTHING if root is None else EventFilter(tree=root)
        return list(fold_index(await self.read(flt)).values())

    def read_session_sync(self, session_id: str) -> list[Record]:
        raise NotImplementedError(f"{type(self).__name__} has no synchronous reads")

    def _close_subscriptions(self) -> None:
        self._closed = True
        self._fanout.close_all("the event log closed")
