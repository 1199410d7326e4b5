"""The tail thread of a shared PostgreSQL log: other nodes' commits, read back in order.

Invariants:
- after each ``NOTIFY`` from another node (sent inside its commit, so delivered once
  the rows are visible), or after ``POLL_SECONDS`` without one, every committed
  record past the cursor is read, in seq order, and handed to the trio thread
  (``log._deliver``, which publishes contiguously and drops what it already has);
  a lost notification (a reconnect) delays records but never loses them;
- any failure reconnects after ``RECONNECT_SECONDS``; only ``stop`` ends the thread,
  without asking the server anything (it shuts the tail's socket down: ``pgcut.py``),
  so a stalled server never holds a close.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import msgspec
import psycopg
import trio
from psycopg import sql

from ..events import Record
from ..logger import get_logger
from .pgcut import ListenerSocket

if TYPE_CHECKING:
    from .postgres import PostgresEventLog

POLL_SECONDS = 2.0
"""How often the tail looks for other nodes' commits when no notification came."""
TAIL_PAGE = 1_000
RECONNECT_SECONDS = 1.0

_records_decoder = msgspec.json.Decoder(list[Record])
log = get_logger("halo_actors.log")


class Tail:
    """One log's tail thread (``start``, then ``stop`` from a worker thread)."""

    def __init__(self, event_log: PostgresEventLog) -> None:
        self.log = event_log
        self._stopping = threading.Event()
        self._listening = ListenerSocket(self._stopping)
        self._thread = threading.Thread(target=self._loop, name="halo-pg-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        """Follow other nodes' commits until ``stop``; reconnect on any failure."""
        channel = sql.Identifier(self.log._sql.channel)
        while not self._stopping.is_set():
            try:
                with self._listening.attached(self.log._connect(autocommit=True)) as conn:
                    if conn is None:
                        return
                    conn.execute(sql.SQL("LISTEN {}").format(channel))
                    self._follow(conn)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.warning("event_log_tail_reconnecting", schema=self.log.schema, error=repr(exc))
                self._stopping.wait(RECONNECT_SECONDS)

    def _follow(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        cursor = self.log._published_seq
        self._read(conn, cursor)
        node_id = self.log.node_id
        while not self._stopping.is_set():
            got = None
            for notify in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                got = notify.payload
            if got is not None:
                node, _, last = got.partition(":")
                if node == node_id or not last.isdigit() or int(last) <= cursor:
                    continue  # our own commit (the writer publishes it), or already read
            cursor = self._read(conn, max(cursor, self.log._published_seq))

    def _read(self, conn: psycopg.Connection[tuple[object, ...]], cursor: int) -> int:
        """Read every committed record after ``cursor`` and hand it to the trio thread."""
        statement = self.log._sql.tail
        while True:
            bodies = [b for (b,) in conn.execute(statement, (cursor, TAIL_PAGE))]
            if not bodies:
                return cursor
            records = _records_decoder.decode(b"[" + b",".join(bodies) + b"]")  # type: ignore[arg-type]
            cursor = records[-1].seq
            try:
                self.log._token.run_sync_soon(self.log._deliver, records)
            except trio.RunFinishedError:
                self._stopping.set()
                return cursor
            if len(bodies) < TAIL_PAGE:
                return cursor

    def stop(self) -> None:
        """End the thread's wait by shutting its connection down, and join it."""
        self._stopping.set()
        if self._thread.ident is None:
            return
        self._listening.shut_down()
        self._thread.join(RECONNECT_SECONDS + POLL_SECONDS)
