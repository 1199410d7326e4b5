"""Messages for a tree owned by another node: an inbox row in the shared database.

A node that receives a message for a tree another node owns writes one ``inbox`` row
(in the workspace's schema) and, in the same transaction, ``NOTIFY``s the owner. The
owner logs the message in the tree's session (``MessageQueued`` carrying the row's
id), then settles the row with the outcome (the message's seq and whether it started
a run, or why it was refused) and ``NOTIFY``s the sender, which only then
acknowledges. See ``docs/design/postgres.md`` (Forwarding).

Invariants:
- a row is written and announced in one transaction: the owner never sees a
  notification for a row it cannot read, and a lost notification only delays
  (both sides also poll every ``POLL_SECONDS``);
- a row is settled only after its message is durable in the log (or refused); a row
  left unsettled by a node that died is delivered by the tree's next owner, which
  first looks for the row's id in the tree's log, so no message is logged twice;
- rows are never deleted here: a settled row is the record of an acknowledgement;
- closing never waits on the server: the listener is woken by shutting its socket down
  (``pgcut.py``), and it is a daemon thread, so a program that ends without closing
  still exits.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Literal, NamedTuple

import msgspec
import psycopg
import trio
from psycopg import sql

from ..logger import get_logger
from .pgcut import ListenerSocket
from .pgschema import ensure_tables
from .postgres import PostgresEventLog

POLL_SECONDS = 1.0
"""How often both sides look at the table when no notification came."""
RECONNECT_SECONDS = 1.0

Conn = psycopg.Connection[tuple[object, ...]]
log = get_logger("halo_actors.inbox")


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """What a sender asked for: ``Supervisor.send``'s arguments."""

    text: str
    images: tuple[str, ...] = ()
    source: str | None = None
    mode: Literal["soft", "hard"] = "soft"


class Row(NamedTuple):
    id: int
    root: str
    session_id: str
    message: Message


class Outcome(NamedTuple):
    seq: int
    """The seq of the message's ``MessageQueued`` record (0 when refused)."""
    started: bool
    error: str | None
    """``<kind>: <message>`` when the owner refused it (``not_found``, ``unavailable``,
    ``invalid``); None when logged."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Message).decode


class _Statements:
    def __init__(self, schema: str) -> None:
        t = sql.Identifier(schema, "inbox")
        self.channel = f"{schema}_inbox"
        self.relations = [t, sql.Identifier(schema, "inbox_unsettled")]
        self.create = [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (id BIGSERIAL PRIMARY KEY, root TEXT NOT NULL,"
                " session_id TEXT NOT NULL, to_node TEXT NOT NULL, body BYTEA NOT NULL,"
                " created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),"
                " seq BIGINT, started BOOLEAN, error TEXT)"
            ).format(t),
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS inbox_unsettled ON {} (root, id) WHERE seq IS NULL"
            ).format(t),
        ]
        self.put = sql.SQL(
            "WITH row AS (INSERT INTO {} (root, session_id, to_node, body)"
            " VALUES (%(root)s, %(sid)s, %(to)s, %(body)s) RETURNING id)"
            " SELECT id, pg_notify(%(channel)s, 'deliver:' || %(to)s) FROM row"
        ).format(t)
        self.outcome = sql.SQL("SELECT seq, started, error FROM {} WHERE id = %s").format(t)
        self.unsettled = sql.SQL(
            "SELECT id, root, session_id, body FROM {} WHERE seq IS NULL AND root = ANY(%s)"
            " ORDER BY id LIMIT 200"
        ).format(t)
        self.settle = sql.SQL(
            "WITH done AS (UPDATE {} SET seq = %(seq)s, started = %(started)s, error = %(error)s"
            " WHERE id = %(id)s AND seq IS NULL RETURNING id)"
            " SELECT pg_notify(%(channel)s, 'done:' || id) FROM done"
        ).format(t)


class Inbox:
    """One node's side of one workspace's inbox. Run :meth:`open` (a context manager)."""

    def __init__(self, event_log: PostgresEventLog) -> None:
        self.log = event_log
        self.node_id = event_log.node_id
        self._sql = _Statements(event_log.schema)
        self._conn: Conn | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._token = trio.lowlevel.current_trio_token()
        self.arrived = trio.Event()
        """Set (and replaced by the owner's loop) when a row for this node may be waiting."""
        self._settled: dict[int, trio.Event] = {}
        self._stopping = threading.Event()
        self._listening = ListenerSocket(self._stopping)
        self._thread = threading.Thread(target=self._listen, name="halo-pg-inbox", daemon=True)

    @classmethod
    @asynccontextmanager
    async def open(cls, event_log: PostgresEventLog) -> AsyncIterator[Inbox]:
        inbox = cls(event_log)
        inbox._conn = await trio.to_thread.run_sync(inbox._prepare)
        inbox._thread.start()
        try:
            yield inbox
        finally:
            inbox._stopping.set()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(inbox._stop)

    def _connect(self) -> Conn:
        return psycopg.connect(
            self.log.dsn,
            autocommit=True,
            application_name=f"halo-{self.node_id}-inbox"[:63],
            connect_timeout=10,
        )

    def _prepare(self) -> Conn:
        conn = self._connect()
        ensure_tables(conn, self._sql.channel, self._sql.relations, self._sql.create)
        return conn

    def _stop(self) -> None:
        """After ``_stopping`` is set: wake the listener out of its wait by ending its
        connection from this side (it sees the connection end, finds itself stopping and
        returns), then close ours."""
        self._listening.shut_down()
        self._thread.join(RECONNECT_SECONDS + POLL_SECONDS)
        if self._conn is not None:
            self._conn.close()

    async def _query(
        self, statement: sql.Composed, params: Sequence[object] | Mapping[str, object]
    ) -> list[tuple[object, ...]]:
        conn = self._conn
        assert conn is not None, "opened by Inbox.open"

        def run() -> list[tuple[object, ...]]:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    # --- the sender's side -------------------------------------------------------------

    async def put(self, root: str, session_id: str, to_node: str, message: Message) -> int:
        """Store ``message`` for ``session_id`` and wake ``to_node``; the row's id."""
        params = {
            "root": root,
            "sid": session_id,
            "to": to_node,
            "body": _encode(message),
            "channel": self._sql.channel,
        }
        rows = await self._query(self._sql.put, params)
        (row_id,) = rows[0][:1]
        assert isinstance(row_id, int)
        return row_id

    async def outcome(self, row_id: int) -> Outcome | None:
        """The row's outcome once settled; None while it waits for its owner."""
        rows = await self._query(self._sql.outcome, (row_id,))
        if not rows or rows[0][0] is None:
            return None
        seq, started, error = rows[0]
        return Outcome(int(seq), bool(started), None if error is None else str(error))  # type: ignore[call-overload]

    async def wait_settled(self, row_id: int) -> None:
        """Until the owner may have settled row ``row_id`` (a notification, or a poll's
        interval passed): the caller then reads :meth:`outcome`."""
        event = self._settled.setdefault(row_id, trio.Event())
        try:
            with trio.move_on_after(POLL_SECONDS):
                await event.wait()
        finally:
            self._settled.pop(row_id, None)

    # --- the owner's side ----------------------------------------------------------------

    async def unsettled(self, roots: list[str]) -> list[Row]:
        """Rows waiting for trees in ``roots``, oldest first."""
        if not roots:
            return []
        rows = await self._query(self._sql.unsettled, (roots,))
        return [
            Row(int(i), str(r), str(s), _decode(bytes(b)))  # type: ignore[call-overload]
            for i, r, s, b in rows
        ]

    async def settle(self, row_id: int, seq: int, started: bool, error: str | None) -> None:
        """Record the outcome (once; a row settled already is left) and wake the sender."""
        params = {
            "id": row_id,
            "seq": seq,
            "started": started,
            "error": error,
            "channel": self._sql.channel,
        }
        await self._query(self._sql.settle, params)

    # --- the listener thread ------------------------------------------------------------

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                with self._listening.attached(self._connect()) as conn:
                    if conn is None:
                        return
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._sql.channel)))
                    self._token.run_sync_soon(self._wake, "deliver:" + self.node_id)
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                            self._token.run_sync_soon(self._wake, notify.payload)
            except trio.RunFinishedError:
                return
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.warning("inbox_listener_reconnecting", schema=self.log.schema, error=repr(exc))
                self._stopping.wait(RECONNECT_SECONDS)

    def _wake(self, payload: str) -> None:
        """On the trio thread: a row for this node, or a row settled for a waiting sender."""
        kind, _, rest = payload.partition(":")
        if kind == "deliver" and rest == self.node_id:
            self.arrived.set()
        elif kind == "done" and rest.isdigit():
            event = self._settled.get(int(rest))
            if event is not None:
                event.set()
