"""Ending a PostgreSQL connection from another thread, without asking the server.

A server that stops answering (SIGSTOP, a stalled host: the kernel keeps the TCP
connection open, so nothing fails) holds every call on its connections: psycopg has no
client-side timeout short of closing the socket. Two threads here must not wait on it:

- a listener waiting in ``conn.notifies(...)``, which a close has to wake: it used to
  be woken by a ``NOTIFY`` sent on another connection, a round trip that never came
  back. :class:`ListenerSocket` lets the closer shut the listener's socket down from
  this side instead: the wait ends with an error, the listener finds itself stopping,
  and returns;
- the writer inside a commit, a reader inside a read: :class:`CallWatch` cuts a call
  that runs past its deadline the same way. A cut commit fails as on a lost connection
  (its outcome unknown) and the log fails (fail-stop); a cut read fails alone, and the
  next read connects anew.

Invariants:
- a socket is shut down only while its connection is open: a listener attaches and
  closes its connection under the lock the closer holds, and a call is cut only while
  it is under way on its connection (closed only after), so a descriptor number reused
  after a close is never touched;
- a listener that attaches after the close was asked for (``stopping`` set first) is
  told to stop instead of listening;
- a call is cut at most once, and only the call that ran past the deadline (a later
  one is never cut for an earlier one's time).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import psycopg

from ..logger import get_logger
from .pgschema import Conn

log = get_logger("halo_actors.log")


def cut(conn: Conn) -> None:
    """Shut ``conn``'s socket down from this side (the socket itself, which every
    descriptor of it shares): whatever waits on it gets an error at once. The caller
    guarantees that ``conn`` is open."""
    with (
        contextlib.suppress(OSError, psycopg.Error),
        socket.socket(fileno=os.dup(conn.fileno())) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


class ListenerSocket:
    """The one connection a listener thread listens on, if it has one now."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._lock = threading.Lock()
        self._conn: Conn | None = None

    @contextlib.contextmanager
    def attached(self, conn: Conn) -> Iterator[Conn | None]:
        """The listener's side: ``conn`` while it listens on it, or None when it must stop
        instead; the connection is closed when the block ends, whatever happened."""
        try:
            with self._lock:
                self._conn = None if self._stopping.is_set() else conn
                listening = self._conn
            yield listening
        finally:
            with self._lock:
                self._conn = None
                conn.close()

    def shut_down(self) -> None:
        """The closer's side, after setting ``stopping``: end the listener's connection."""
        with self._lock:
            if self._conn is not None:
                cut(self._conn)


class CallWatch:
    """A daemon thread that cuts a call on a connection once it has run ``deadline`` seconds.

    One thread of calls wraps each call in :meth:`watching` (the log's writer its commits,
    its reads theirs); the watch wakes every quarter of the deadline, so a call is cut
    between ``deadline`` and 1.25 × ``deadline`` after it began. Nothing is added to a call
    but an uncontended lock, twice."""

    def __init__(self, deadline: float, *, name: str) -> None:
        self.deadline = deadline
        self._lock = threading.Lock()
        self._calls = 0
        """How many calls began (the one under way, if ``_since`` is set)."""
        self._since: float | None = None
        self._conn: Conn | None = None
        """The connection of the call under way."""
        self._cut: int | None = None
        """The number of the last call cut."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.what = name

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    @contextlib.contextmanager
    def watching(self, conn: Conn) -> Iterator[Callable[[], bool]]:
        """Around one call on ``conn`` (open for the whole block); yields "was it cut?"."""
        with self._lock:
            self._calls += 1
            call = self._calls
            self._since, self._conn = time.monotonic(), conn
        try:
            yield lambda: self._cut == call
        finally:
            with self._lock:
                self._since = self._conn = None

    def _loop(self) -> None:
        while not self._stopping.wait(self.deadline / 4):
            with self._lock:
                since, conn = self._since, self._conn
                if since is None or conn is None or self._cut == self._calls:
                    continue  # nothing under way, or cut already (its caller is failing it)
                if time.monotonic() - since < self.deadline:
                    continue
                self._cut = self._calls
                log.error(
                    "event_log_call_cut", call=self.what, after_s=round(time.monotonic() - since, 1)
                )
                cut(conn)  # the call is under way: its connection is open
