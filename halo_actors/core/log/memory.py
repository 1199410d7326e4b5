"""In-memory event log: the fast backend for tests and embedding without durability.

Records live in one list ordered by seq plus a per-session index; appends
commit and publish synchronously, so order is trivially preserved.
"""

from __future__ import annotations

import bisect

import trio

from ..errors import StoreFailed
from ..events import Event, Record
from ..ids import SEPARATOR
from .base import DEFAULT_MAX_EVENT_BYTES, LogBase
from .filter import EVERYTHING, EventFilter


class MemoryEventLog(LogBase):
    sync_reads = True

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        super().__init__(max_event_bytes=max_event_bytes)
        self._records: list[Record] = []
        self._by_session: dict[str, list[Record] | Record] = {}
        self._by_tree: dict[str, list[Record] | Record] = {}

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        """Stored and durable at once (as durable as memory gets): published right here."""
        if self._failure is not None:
            raise StoreFailed(str(self._failure))
        records, _ = self._stamp(session_id, events)
        self._records.extend(records)
        self._index(session_id, records)
        self._committed(records)
        return records

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        records = self.append_nowait(session_id, *events)
        await trio.lowlevel.cancel_shielded_checkpoint()  # committed: must not raise Cancelled
        return records

    def _index(self, session_id: str, records: list[Record]) -> None:
        """Per session and per tree. While a tree is only its root session, both indexes
        share one entry (most sessions of a big idle population are lone roots), and an
        entry of one record is that record, not a list of it (most idle sessions have
        one: their ``session_created``). A list grows in place (the common case, first)."""
        by_session, by_tree = self._by_session, self._by_tree
        old = by_session.get(session_id)
        if type(old) is list:
            old.extend(records)
            mine: list[Record] | Record = old
        else:
            mine = by_session[session_id] = _grown(old, records)
        root = session_id.partition(SEPARATOR)[0]
        tree = by_tree.get(root)
        if tree is mine:  # a lone root's shared list, grown already
            return
        if session_id == root and (tree is None or tree is old):  # shared, still
            by_tree[root] = mine
        elif tree is None:
            by_tree[root] = list(records)
        elif session_id != root and tree is by_session.get(root):  # the first other one
            by_tree[root] = [*_as_list(tree), *records]
        elif isinstance(tree, list):
            tree.extend(records)
        else:
            by_tree[root] = [tree, *records]

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        if flt.session_id is not None:
            source = _as_list(self._by_session.get(flt.session_id))
        elif flt.tree is not None:
            source = _as_list(self._by_tree.get(flt.tree))
        else:
            source = self._records
        start = bisect.bisect_right(source, after_seq, key=lambda r: r.seq)
        out: list[Record] = []
        for record in source[start:]:
            if until_seq is not None and record.seq > until_seq:
                break
            if limit is not None and len(out) >= limit:
                break
            if flt.matches(record):
                out.append(record)
        return out

    def read_session_sync(self, session_id: str) -> list[Record]:
        self._check_open()
        return list(_as_list(self._by_session.get(session_id)))

    async def aclose(self) -> None:
        self._close_subscriptions()
        await trio.lowlevel.checkpoint()


def _grown(entry: list[Record] | Record | None, records: list[Record]) -> list[Record] | Record:
    """``entry`` with ``records`` after it: one record alone stays bare; a list grows in place."""
    if entry is None:
        return records[0] if len(records) == 1 else list(records)
    if isinstance(entry, Record):
        return [entry, *records]
    entry.extend(records)
    return entry


def _as_list(entry: list[Record] | Record | None) -> list[Record]:
    if entry is None:
        return []
    return [entry] if isinstance(entry, Record) else entry
