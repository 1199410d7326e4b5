"""The event-log protocol and the part every backend shares.

:class:`LogBase` validates, encodes, stamps (sequence number, server time) and
publishes; a backend only persists and reads. See ``docs/design/event-log.md``.

Invariants:
- sequence numbers strictly increase across the log's whole life (a backend
  restarts from the largest stored seq) and are never reused; a failed commit
  may leave a gap, never a duplicate;
- timestamps (ms) never decrease along the sequence;
- an ``append`` either raises before anything is queued (bad input, closed log)
  or returns after its records are durable; it cannot be cancelled in between,
  so a caller's view never disagrees with the log;
- records are published to subscribers after commit and in sequence order.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from ..errors import EventTooLarge, InvalidInput, StoreClosed
from ..events import FRAME_ONLY_KINDS, Event, Record, encode_record, kind_of
from ..ids import check_session_id
from .fanout import FanOut, Subscription
from .filter import EVERYTHING, EventFilter

DEFAULT_MAX_EVENT_BYTES = 1 << 20
DEFAULT_SUBSCRIBER_BUFFER = 4_096


class EventLog(Protocol):
    """What the runtime and the fronts need from a log; every backend passes one contract suite."""

    max_event_bytes: int
    """The largest encoded record the log stores; bigger ones raise ``EventTooLarge``."""

    @property
    def last_seq(self) -> int:
        """The largest sequence number published so far (0 for an empty log)."""
        ...

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        """Stamp and store ``events`` for one session atomically; return their records."""
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

    async def aclose(self) -> None: ...


class LogBase:
    """Validation, stamping and fan-out; subclasses implement ``_persist`` and ``_read``."""

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._fanout = FanOut()
        self._next_seq = 1
        self._last_ts = 0
        self._published_seq = 0
        self._closed = False

    @property
    def last_seq(self) -> int:
        return self._published_seq

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

    def _stamp(self, session_id: str, events: Sequence[Event]) -> list[tuple[Record, bytes]]:
        """Validate and encode; raises before any state changes on bad input."""
        self._check_open()
        check_session_id(session_id)
        if not events:
            raise InvalidInput("append needs at least one event")
        now = max(time.time_ns() // 1_000_000, self._last_ts)
        stamped = []
        for offset, event in enumerate(events):
            if kind_of(event) in FRAME_ONLY_KINDS:
                raise InvalidInput(f"{kind_of(event)!r} frames are never stored")
            record = Record(seq=self._next_seq + offset, session_id=session_id, ts=now, event=event)
            body = encode_record(record)
            if len(body) > self.max_event_bytes:
                raise EventTooLarge(
                    f"{kind_of(event)} event is {len(body)} bytes; the cap is {self.max_event_bytes}"
                )
            stamped.append((record, body))
        self._next_seq += len(events)
        self._last_ts = now
        return stamped

    def _publish(self, records: list[Record]) -> None:
        """Called after commit, in sequence order, on the trio thread."""
        self._published_seq = records[-1].seq
        self._fanout.publish(records)

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

    def _close_subscriptions(self) -> None:
        self._closed = True
        self._fanout.close_all("the event log closed")
