"""Live fan-out of committed records, and catch-up subscriptions.

Invariants:
- ``FanOut.publish`` is called only after a commit, in sequence order, from the
  trio thread; it never blocks. A subscriber whose bounded buffer is full is
  closed with an overflow reason instead of being skipped past.
- A :class:`Subscription` yields every matching record with ``seq > after_seq``
  exactly once and in order: stored records up to the horizon (the last
  published seq when it registered) come from storage, everything after the
  horizon from its live buffer. Registration and the horizon read happen with
  no checkpoint between them, so nothing falls in between.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import trio

from ..errors import StoreClosed, SubscriptionClosed, SubscriptionOverflow
from ..events import Record
from ..ids import root_of
from .filter import EventFilter

ReadPage = Callable[[EventFilter, int, int, int], Awaitable[list[Record]]]
"""``read_page(filter, after_seq, until_seq, limit)``: stored records in that range."""

CATCH_UP_PAGE = 1_000


@dataclass(eq=False)
class _Listener:
    filter: EventFilter
    send: trio.MemorySendChannel[Record]
    closed_reason: str | None = None
    overflowed: bool = False


@dataclass
class FanOut:
    """Subscribers indexed by session and by tree, so publishing costs O(interested)."""

    by_session: dict[str, set[_Listener]] = field(default_factory=dict)
    by_tree: dict[str, set[_Listener]] = field(default_factory=dict)
    everyone: set[_Listener] = field(default_factory=set)

    def _bucket(self, flt: EventFilter, create: bool) -> set[_Listener] | None:
        if flt.session_id is not None:
            key, index = flt.session_id, self.by_session
        elif flt.tree is not None:
            key, index = flt.tree, self.by_tree
        else:
            return self.everyone
        if create:
            return index.setdefault(key, set())
        return index.get(key)

    def add(self, listener: _Listener) -> None:
        bucket = self._bucket(listener.filter, create=True)
        assert bucket is not None
        bucket.add(listener)

    def remove(self, listener: _Listener) -> None:
        bucket = self._bucket(listener.filter, create=False)
        if bucket is None:
            return
        bucket.discard(listener)
        if not bucket and bucket is not self.everyone:
            flt = listener.filter
            if flt.session_id is not None:
                self.by_session.pop(flt.session_id, None)
            elif flt.tree is not None:
                self.by_tree.pop(flt.tree, None)

    def count(self) -> int:
        return (
            len(self.everyone)
            + sum(map(len, self.by_session.values()))
            + sum(map(len, self.by_tree.values()))
        )

    def publish(self, records: list[Record]) -> None:
        if not (self.everyone or self.by_session or self.by_tree):  # nobody listens
            return
        for record in records:
            interested = [
                self.by_session.get(record.session_id),
                self.by_tree.get(root_of(record.session_id)),
                self.everyone,
            ]
            for bucket in interested:
                if bucket:
                    for listener in list(bucket):
                        if listener.filter.matches(record):
                            self._offer(listener, record)

    def _offer(self, listener: _Listener, record: Record) -> None:
        try:
            listener.send.send_nowait(record)
        except trio.WouldBlock:
            listener.overflowed = True
            self.close(listener, "subscriber fell behind: buffer full")
        except trio.ClosedResourceError:
            self.remove(listener)

    def close(self, listener: _Listener, reason: str) -> None:
        listener.closed_reason = listener.closed_reason or reason
        listener.send.close()
        self.remove(listener)

    def close_all(self, reason: str) -> None:
        for listener in [*self.everyone, *_flatten(self.by_session), *_flatten(self.by_tree)]:
            self.close(listener, reason)


def _flatten(index: dict[str, set[_Listener]]) -> list[_Listener]:
    return [listener for bucket in index.values() for listener in bucket]


class Subscription:
    """An async iterator of records: catch-up from storage, then the live tail.

    Ends by raising :class:`SubscriptionClosed` (``SubscriptionOverflow`` when the
    buffer filled up); ``resume_after`` is the last seq this subscription yielded.
    """

    def __init__(
        self,
        fanout: FanOut,
        read_page: ReadPage,
        flt: EventFilter,
        after_seq: int,
        horizon: int,
        buffer_size: int,
    ) -> None:
        send, self._receive = trio.open_memory_channel[Record](buffer_size)
        self._listener = _Listener(flt, send)
        self._fanout = fanout
        self._read_page = read_page
        self._after_seq = after_seq
        self._horizon = horizon
        self.cursor = after_seq
        """The seq of the last record yielded (or ``after_seq``)."""
        fanout.add(self._listener)

    def close(self) -> None:
        """Stop receiving; idempotent."""
        self._fanout.remove(self._listener)
        self._listener.send.close()
        self._receive.close()

    def __aiter__(self) -> AsyncIterator[Record]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Record]:
        flt = self._listener.filter
        while self.cursor < self._horizon:
            try:
                page = await self._read_page(flt, self.cursor, self._horizon, CATCH_UP_PAGE)
            except StoreClosed:  # closed mid catch-up: end like any other subscription
                raise SubscriptionClosed("the event log closed", self.cursor) from None
            for record in page:
                self.cursor = record.seq
                yield record
            if len(page) < CATCH_UP_PAGE:
                break
        self.cursor = max(self.cursor, self._horizon)
        async for record in self._receive:
            if record.seq > self.cursor:
                self.cursor = record.seq
                yield record
        reason = self._listener.closed_reason or "subscription closed"
        error = SubscriptionOverflow if self._listener.overflowed else SubscriptionClosed
        raise error(reason, self.cursor)
