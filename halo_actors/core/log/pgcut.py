"""Ending a PostgreSQL connection from another thread, without asking the server.

A server that stops answering (SIGSTOP, a stalled host: the kernel keeps the TCP
connection open, so nothing fails) holds every call on its connections: psycopg has no
client-side timeout short of closing the socket. Two threads here must not wait on it:

- a listener waiting in ``conn.notifies(...)``, which a close has to wake: it used to
  be woken by a ``NOTIFY`` sent on another connection, a round trip that never came
  back. :class:`ListenerSocket` lets the closer shut the listener's socket down from
  this side instead: the wait ends with an error, the listener finds itself stopping,
  and returns;
- the writer inside a commit: :class:`CommitWatch` cuts a commit that runs past its
  deadline the same way; the commit fails as on a lost connection (its outcome
  unknown), and the log fails (fail-stop), as it does for a lost connection.

Invariants:
- a socket is shut down only while its connection is open: a listener attaches and
  closes its connection under the lock the closer holds, and a commit is cut only while
  the writer is inside it (it closes its connection only after), so a descriptor
  number reused after a close is never touched;
- a listener that attaches after the close was asked for (``stopping`` set first) is
  told to stop instead of listening;
- a commit is cut at most once, and only the commit that ran past the deadline (a
  later one is never cut for an earlier one's time).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import psycopg

from ..logger import get_logger

Conn = psycopg.Connection[tuple[object, ...]]

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


class CommitWatch:
    """A daemon thread that cuts the writer's commit once it has run ``deadline`` seconds.

    The writer wraps each commit in :meth:`watching`; the watch wakes every quarter of the
    deadline, so a commit is cut between ``deadline`` and 1.25 × ``deadline`` after it
    began. Nothing is added to a commit but an uncontended lock, twice."""

    def __init__(self, conn: Conn, deadline: float, *, name: str) -> None:
        self.deadline = deadline
        self._conn = conn
        self._lock = threading.Lock()
        self._commit = 0
        """How many commits began (the one under way, if ``_since`` is set)."""
        self._since: float | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.cuts = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around one commit, on the writer thread."""
        with self._lock:
            self._commit += 1
            self._since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    def _loop(self) -> None:
        seen: tuple[int, float | None] = (0, None)
        while not self._stopping.wait(self.deadline / 4):
            with self._lock:
                since = self._since
                if since is None or time.monotonic() - since < self.deadline:
                    continue
                if seen == (self._commit, since):
                    continue  # cut already; the writer is failing it
                seen = (self._commit, since)
                log.error("event_log_commit_cut", after_s=round(time.monotonic() - since, 1))
                self.cuts += 1
                cut(self._conn)  # the writer is inside the commit: its connection is open
