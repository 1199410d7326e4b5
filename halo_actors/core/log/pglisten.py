"""A ``LISTEN`` connection that a closing thread can end without asking the server.

A listener thread waits in ``conn.notifies(...)``. To stop it at once, a close used to
send it a ``NOTIFY`` on another connection: a round trip with no client-side timeout, so
a server that stopped answering (SIGSTOP, a stalled host: the kernel keeps the TCP
connection open) held the close forever. :class:`ListenerSocket` lets the closing thread
shut the listener's socket down from this side instead: the listener's wait ends with
an error, it finds itself stopping, and returns. No server is involved.

Invariants:
- a socket is shut down only while its connection is open: the listener attaches and
  closes its connection under the same lock the closer holds, so a descriptor number
  reused after that close is never touched;
- a listener that attaches after the close was asked for (``stopping`` set first) is
  told to stop instead of listening.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]


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
        """The closer's side, after setting ``stopping``: end the listener's connection
        from this side (the socket itself, which every descriptor of it shares)."""
        with self._lock, contextlib.suppress(OSError, psycopg.Error):
            if self._conn is not None:
                with socket.socket(fileno=os.dup(self._conn.fileno())) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
