"""PostgreSQL event log: one shared log for any number of processes (nodes).

psycopg's async API is asyncio-only, so this backend uses its sync API in threads:
one writer thread (group commit, as the SQLite log), one reader connection used
through a worker thread, and one tail thread that ``LISTEN``\\s for other nodes'
commits. See ``docs/design/postgres.md``.

Two modes, chosen at open:
- **shared** (the default; any number of nodes write the schema): seqs come from the
  commit, so the log is not pipelined and ``append`` waits for its commit;
- **single writer** (``single_writer=True``; this node is the schema's only writer,
  so it has no tail thread): the log is pipelined like the SQLite one,
  ``append_nowait`` stamps at once, and each commit checks, under the head row lock, that the head is exactly
  where this node's stamps began (compare-and-set): if another writer ever moved it,
  the commit stores nothing and the log stops (fail-stop). A session-level advisory
  lock on the writer's connection keeps the two modes apart (a single writer excludes
  every other writer; shared writers exclude a single one).

Invariants:
- **read order is commit order.** A commit takes its sequence numbers from the one
  ``log_head`` row (``UPDATE … RETURNING``), whose row lock it holds until it commits;
  the next writer, on any node, gets the lock only after that commit is visible.
  So the committed seqs are always a prefix ``1..head`` with no hole, and a reader
  that reads ``seq > cursor`` can never skip a row that commits later with a lower
  number. A rolled-back commit rolls its head update back too: no gap.
- ``ts`` is the database's clock in ms, taken under the same lock and never below
  the previous commit's, so it never decreases along seq whichever node wrote.
- records reach this process's subscribers after commit, in seq order, with no gap:
  a node's own commits are handed over by its writer; other nodes' commits are read
  back by the tail thread after their ``NOTIFY`` (and by a poll, should a
  notification be lost); out-of-order pieces wait in ``_held`` until the gap fills.
  An append returns once its records are published here.
- fencing: a tree's appends can be tied to a lease epoch (``hold``); the commit
  then checks, in the same transaction and under a share lock on the lease row,
  that this node still holds that epoch, and refuses the append otherwise
  (``Fenced``, nothing stored; in single-writer mode the whole log stops, since
  the seqs stamped after it can no longer be kept).
- fail-stop: when the writer's connection breaks (a commit whose outcome is unknown)
  the writer stops and every queued and later append fails with ``StoreFailed``;
  the process must reopen the log, which recovers from what was committed. In
  single-writer mode any failed commit stops the log, as with SQLite.
- a test or a deployment names its own ``schema``; nothing outside it is touched.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import re
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar, cast

import msgspec
import psycopg
import trio
from psycopg import sql

from ..errors import EventTooLarge, Fenced, InvalidInput, StoreClosed, StoreFailed
from ..events import FRAME_ONLY_KINDS, Event, Record, encode_event, kind_of
from ..ids import check_session_id, root_of
from ..logger import get_logger
from .base import DEFAULT_MAX_EVENT_BYTES, LogBase
from .filter import EVERYTHING, EventFilter
from .pgcommit import (
    Pending,
    Stamped,
    fence,
    fence_stamped,
    insert_stamped,
    insert_taking_seqs,
    record_body,
)
from .pgcut import CallWatch
from .pgschema import SCHEMA_NAME, Conn, create_schema, tables
from .pgtail import Tail

__all__ = ["DEFAULT_DSN", "PostgresEventLog", "record_body"]

MAX_GROUP = 2_000
"""Most records one commit takes; the rest wait for the next one."""
RETRIES = 5
"""Times a shared-mode commit the server rolled back (deadlock victim, serialization
failure) is run again before its batch fails."""
ROLLED_BACK = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
"""What the server rolls a transaction back for, to be run again."""
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
WRITER_OPTIONS = "-c idle_in_transaction_session_timeout=3000 -c statement_timeout=15000"
"""A writer stalled inside its transaction (SIGSTOP, a frozen VM) holds the head row and
lease rows locked; the server ends its session after this long so the other nodes go on
(the stalled node's writer then finds its connection gone and stops)."""
COMMIT_DEADLINE = 30.0
"""Seconds after which the writer's commit is cut on the client side (``pgcut.py``): it
fails as on a lost connection and the log fails (fail-stop). Longer than the server-side
timeouts above, so it bounds only what they cannot: a server, or a network path to it,
that stopped answering altogether (without it every append would wait forever)."""
READ_DEADLINE = 120.0
"""Seconds after which a read is cut the same way: it fails alone (a long read of a big
tree is legitimate, hence the margin; the bound is for a server that stopped answering,
whose reads used to hold their callers, and every read queued behind them, for ever)."""

_records_decoder = msgspec.json.Decoder(list[Record])
_RECORD_OVERHEAD = len(b'{"seq":,"sessionId":"","ts":,"event":}') + 16 + 13
"""Bytes a record adds around its event and session id (seq and ts at their widest)."""
log = get_logger("halo_actors.log")
T = TypeVar("T")


class _WriterBroken(Exception):
    """The writer's connection failed mid-commit: the outcome is unknown, so stop."""


class PostgresEventLog(LogBase):
    """Open with :meth:`open` (an async classmethod); close with :meth:`aclose`.

    Shared mode (the default) is not pipelined: seqs come from the commit, so ``append``
    (which waits for it) is the way in and ``append_nowait`` is refused. A single-writer
    log is pipelined (see the module docstring)."""

    pipelined = False

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        max_event_bytes: int,
        node_id: str,
        single_writer: bool,
        commit_deadline: float = COMMIT_DEADLINE,
        read_deadline: float = READ_DEADLINE,
    ) -> None:
        super().__init__(max_event_bytes=max_event_bytes)
        self.dsn = dsn
        self.schema = schema
        self.node_id = node_id
        self.single_writer = single_writer
        self.pipelined = single_writer
        self._sql = tables(schema)
        self._queue: queue.SimpleQueue[Pending | Stamped | None] = queue.SimpleQueue()
        self._writer_conn: psycopg.Connection[tuple[object, ...]] | None = None
        self.commit_deadline = commit_deadline
        self._watch = CallWatch(commit_deadline, name="halo-pg-commit-watch")
        """Cuts a commit past ``commit_deadline``."""
        self._read_watch = CallWatch(read_deadline, name="halo-pg-read-watch")
        """Cuts a read past ``read_deadline``."""
        self._writer_error: BaseException | None = None
        """Why the writer stopped early; once set, appends fail at once."""
        self._own_seq = 0
        """The last seq this node's own commits took (``stamped_seq``)."""
        self._gate = threading.Lock()
        """Orders "queue an append" against "the writer failed and drained the queue"."""
        self._held: dict[int, list[Record]] = {}
        """Committed records waiting for a lower seq to be published first (trio thread)."""
        self._epochs: dict[str, int] = {}
        """Trees whose appends are fenced: root -> the lease epoch this node holds."""
        self._fencing = False
        self.on_fenced: Callable[[str, int], None] | None = None
        """Called on the trio thread with (root, epoch) when a commit refused an append
        whose epoch is stale (``TreeLeases`` then drops the lease)."""
        self._reader: psycopg.Connection[tuple[object, ...]] | None = None
        self._read_limiter = trio.CapacityLimiter(1)
        self._fill_lock = trio.Lock()
        self._token = trio.lowlevel.current_trio_token()
        # daemon threads (here and the tail's): a program that never closes its log still
        # exits; what was acknowledged is committed, an unfinished commit rolls back
        self._writer = threading.Thread(target=self._write_loop, name="halo-pg-writer", daemon=True)
        self._tail = Tail(self)
        self.commits = 0
        """How many transactions the writer has committed (group-commit statistics)."""

    @classmethod
    async def open(
        cls,
        dsn: str = DEFAULT_DSN,
        *,
        schema: str = "halo",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        node_id: str | None = None,
        single_writer: bool = False,
        commit_deadline: float = COMMIT_DEADLINE,
        read_deadline: float = READ_DEADLINE,
    ) -> PostgresEventLog:
        """Connect, create the schema's tables if missing, start the writer and the tail.

        ``single_writer``: this node is the schema's only writer (pipelined appends);
        refused with ``StoreFailed`` while any other node writes it, and vice versa.
        ``commit_deadline``, ``read_deadline``: seconds after which a commit, or a read, is
        cut (``COMMIT_DEADLINE``, ``READ_DEADLINE``)."""
        if not SCHEMA_NAME.fullmatch(schema):
            raise InvalidInput(f"schema name {schema[:80]!r} must match {SCHEMA_NAME.pattern}")
        node = node_id or f"node-{secrets.token_hex(4)}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", node):
            raise InvalidInput(f"node id {node[:80]!r} must be 1-64 of [A-Za-z0-9_.-]")
        log = cls(
            dsn,
            schema,
            max_event_bytes=max_event_bytes,
            node_id=node,
            single_writer=single_writer,
            commit_deadline=commit_deadline,
            read_deadline=read_deadline,
        )
        try:
            last_seq, last_ts = await trio.to_thread.run_sync(log._prepare)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(log._close_connections)
            raise
        log._resume_from(last_seq, last_ts)
        log._watch.start()
        log._read_watch.start()
        log._writer.start()
        if not single_writer:  # nobody else writes: nothing to follow
            log._tail.start()
        return log

    def _connect(
        self, *, autocommit: bool, options: str = ""
    ) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            self.dsn,
            autocommit=autocommit,
            application_name=f"halo-{self.node_id}"[:63],
            connect_timeout=10,
            options=options,
        )

    def _prepare(self) -> tuple[int, int]:
        self._reader = self._connect(autocommit=True)
        create_schema(self._reader, self.schema)
        self._writer_conn = conn = self._connect(autocommit=False, options=WRITER_OPTIONS)
        lock = self._sql.writer_lock if self.single_writer else self._sql.writer_lock_shared
        got = conn.execute(lock, (f"halo-writer:{self.schema}",)).fetchone()
        conn.commit()
        if not got or not got[0]:
            raise StoreFailed(
                f"schema {self.schema!r} is being written by "
                + ("another node" if self.single_writer else "a single-writer node")
                + (": a single-writer log must be its only writer" if self.single_writer else "")
            )
        row = self._reader.execute(self._sql.head).fetchone()
        assert row is not None, "create_schema inserts the head row"
        return int(row[0]), int(row[1])  # type: ignore[call-overload]

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def _close_connections(self) -> None:
        for conn in (self._writer_conn, self._reader):
            if conn is not None:
                conn.close()

    # --- fencing -------------------------------------------------------------------------

    def fence(self) -> None:
        """From now on every append must be to a tree this node holds (``hold``)."""
        self._fencing = True

    def hold(self, root: str, epoch: int) -> None:
        """From now on this node's appends to tree ``root`` carry ``epoch`` and commit only
        while the lease table says this node holds that epoch. Turns fencing on."""
        self._fencing = True
        self._epochs[root_of(check_session_id(root))] = epoch

    def release(self, root: str) -> None:
        """Stop writing tree ``root``: its later appends are refused at once."""
        self._epochs.pop(root, None)

    # --- appending -----------------------------------------------------------------------

    @property
    def stamped_seq(self) -> int:
        return max(self._published_seq, self._own_seq, self._next_seq - 1)

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        if not self.single_writer:
            raise InvalidInput(
                "a shared PostgreSQL log is not pipelined (seqs come from the commit)"
            )
        self._check_writer()
        self._check_open()
        self._epoch_for(session_id)  # refuse an unheld tree before anything is stamped
        return super().append_nowait(session_id, *events)

    def _enqueue(self, session_id: str, records: list[Record], bodies: list[bytes]) -> None:
        item = Stamped(session_id, records, bodies, self._epoch_for(session_id))
        with self._gate:
            self._check_writer()
            self._queue.put(item)

    def _epoch_for(self, session_id: str) -> int | None:
        """The lease epoch an append to this session carries (None: not fencing)."""
        if not self._fencing:
            return None
        root = root_of(check_session_id(session_id))
        epoch = self._epochs.get(root)
        if epoch is None:
            raise Fenced(f"this node does not own tree {root!r}")
        return epoch

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        if self.single_writer:
            return await super().append(session_id, *events)
        self._check_writer()
        pending = self._validate(session_id, events)
        with self._gate:
            self._check_writer()
            self._queue.put(pending)
        with trio.CancelScope(shield=True):
            await pending.done.wait()
            if pending.error is not None:
                if isinstance(pending.error, Fenced):
                    raise pending.error
                raise StoreFailed(f"the event log could not commit: {pending.error!r}") from None
            if self._published_seq < pending.records[-1].seq:  # a gap other nodes left
                await self._publish_through(pending.records[-1].seq)
        return pending.records

    def _validate(self, session_id: str, events: Sequence[Event]) -> Pending:
        """Check and encode on the trio thread; raises before anything is queued."""
        self._check_open()
        check_session_id(session_id)
        if not events:
            raise InvalidInput("append needs at least one event")
        epoch = self._epoch_for(session_id)
        bodies = []
        for event in events:
            if kind_of(event) in FRAME_ONLY_KINDS:
                raise InvalidInput(f"{kind_of(event)!r} frames are never stored")
            body = encode_event(event)
            size = len(body) + len(session_id) + _RECORD_OVERHEAD
            if size > self.max_event_bytes:
                raise EventTooLarge(
                    f"{kind_of(event)} event is {size} bytes; the cap is {self.max_event_bytes}"
                )
            bodies.append(body)
        return Pending(session_id, tuple(events), bodies, epoch)

    def _check_writer(self) -> None:
        self._check_healthy()
        if self._writer_error is not None:
            raise StoreFailed(f"the event log's writer stopped: {self._writer_error!r}")

    def _write_loop(self) -> None:
        """The writer thread. Whatever stops it early, no appender is left waiting."""
        batch: list[Pending | Stamped] = []
        conn, watch = self._writer_conn, self._watch
        assert conn is not None, "connected by _prepare"
        try:
            while (first := self._queue.get()) is not None:
                batch = [first]
                stop = self._take_more(batch)
                if self.single_writer:  # the queue holds one kind of item per mode
                    stamped = cast(list[Stamped], batch)
                    with watch.watching(conn):
                        self._commit_stamped(conn, stamped)
                    self._token.run_sync_soon(self._stamped_done, stamped)
                else:
                    pending = cast(list[Pending], batch)
                    with watch.watching(conn):
                        self._commit(conn, pending)
                    self._token.run_sync_soon(self._batch_done, pending)
                batch = []
                if stop:
                    break
        except trio.RunFinishedError:
            pass  # the program ended without closing the log: committed, nobody to tell
        except BaseException as exc:
            self._writer_failed(exc, batch)
        finally:
            watch.stop()
            conn.close()

    def _writer_failed(self, exc: BaseException, batch: list[Pending | Stamped]) -> None:
        """Fail the batch in hand and everything queued; later appends fail at once."""
        log.error("event_log_writer_stopped", schema=self.schema, exc_info=exc)
        with self._gate:
            self._writer_error = exc
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    batch.append(item)
        waiting = [p for p in batch if isinstance(p, Pending)]
        for pending in waiting:
            pending.error = pending.error or exc
        with contextlib.suppress(trio.RunFinishedError):  # nobody left to wake
            self._token.run_sync_soon(self._writer_stopped, waiting, exc)

    def _writer_stopped(self, batch: list[Pending], exc: BaseException) -> None:
        """On the trio thread: the log has failed (fail-stop) before any appender wakes."""
        self._fail_stop(exc)
        self._batch_done(batch)

    def _take_more(self, batch: list[Pending | Stamped]) -> bool:
        """Greedily take queued appends up to ``MAX_GROUP`` rows; True if a stop was seen."""
        size = batch[0].size
        while size < MAX_GROUP:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)
            size += item.size
        return False

    def _commit_stamped(
        self, conn: psycopg.Connection[tuple[object, ...]], batch: list[Stamped]
    ) -> None:
        """Single writer: one transaction for the batch; any failure stops the writer
        (fail-stop: the records stamped after a lost one cannot be kept)."""
        with conn.transaction(), conn.cursor() as cur:
            fence_stamped(cur, self._sql, self.node_id, batch)
            insert_stamped(cur, self._sql, self.node_id, batch)
        self.commits += 1

    def _stamped_done(self, batch: list[Stamped]) -> None:
        """On the trio thread, in commit order: these records are durable."""
        self._deliver([record for item in batch for record in item.records])

    def _commit(self, conn: psycopg.Connection[tuple[object, ...]], batch: list[Pending]) -> None:
        """One transaction for the batch. A refused or failed commit fails its batch (or,
        fenced, just the stale appends) and the writer goes on; a broken connection stops it.
        A transaction the server rolled back to break a deadlock (or a serialization
        failure) stored nothing and took no seq: it is run again, up to ``RETRIES`` times."""
        for attempt in itertools.count():
            for pending in batch:  # what a rolled-back attempt left
                pending.error = None
                pending.records = []
            try:
                with conn.transaction(), conn.cursor() as cur:
                    accepted = fence(cur, self._sql, self.node_id, batch)
                    if accepted:
                        insert_taking_seqs(cur, self._sql, self.node_id, accepted)
            except ROLLED_BACK as exc:
                if conn.closed or conn.broken or attempt >= RETRIES:
                    self._fail_batch(conn, batch, exc)
                    return
                log.warning("event_log_commit_retried", schema=self.schema, error=repr(exc))
                continue
            except Exception as exc:
                self._fail_batch(conn, batch, exc)
                return
            self.commits += 1
            return

    @staticmethod
    def _fail_batch(
        conn: psycopg.Connection[tuple[object, ...]], batch: list[Pending], exc: Exception
    ) -> None:
        if conn.closed or conn.broken:
            raise _WriterBroken(f"connection lost while committing: {exc!r}") from exc
        for pending in batch:
            pending.error = pending.error or exc
            pending.records = []

    def _batch_done(self, batch: list[Pending]) -> None:
        """On the trio thread, in commit order: publish what committed, wake the appenders."""
        for pending in batch:
            if pending.error is None:
                self._own_seq = max(self._own_seq, pending.records[-1].seq)
                self._deliver(pending.records)
            elif isinstance(pending.error, Fenced) and pending.epoch and self.on_fenced:
                self.on_fenced(root_of(pending.session_id), pending.epoch)
            pending.done.set()

    # --- publishing in seq order ---------------------------------------------------------

    def _deliver(self, records: list[Record]) -> None:
        """Publish a contiguous run of committed records, or hold it until the gap before it
        fills. Records already published are dropped (the tail may re-read our own)."""
        if not records or records[-1].seq <= self._published_seq:
            return
        if records[0].seq > self._published_seq + 1:
            held = self._held.get(records[0].seq)
            if held is None or held[-1].seq < records[-1].seq:
                self._held[records[0].seq] = records
            return
        self._committed([r for r in records if r.seq > self._published_seq])
        while self._held:
            first = min(self._held)
            if first > self._published_seq + 1:
                break
            fresh = [r for r in self._held.pop(first) if r.seq > self._published_seq]
            if fresh:
                self._committed(fresh)

    async def _publish_through(self, seq: int) -> None:
        """Make sure everything up to ``seq`` (committed) is published here: read any gap
        other nodes left below it. A failed read only delays publishing to the tail."""
        async with self._fill_lock:
            while self._published_seq < seq and not self._closed:
                try:
                    page = await self.read(after_seq=self._published_seq, until_seq=seq)
                except (StoreClosed, psycopg.Error) as exc:
                    log.warning("event_log_gap_read_failed", schema=self.schema, error=repr(exc))
                    return
                if not page:
                    return
                self._deliver(page)

    async def catch_up(self) -> int:
        self._check_open()

        def head(reader: Conn) -> int:
            row = reader.execute(self._sql.head).fetchone()
            return int(row[0]) if row else 0  # type: ignore[call-overload]

        last = await self._on_reader(head)
        if last > self._published_seq:
            await self._publish_through(last)
        return self._published_seq

    # --- reading and closing -------------------------------------------------------------

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        self._check_open()
        query, params = self._sql.select(flt, after_seq, until_seq, limit)

        def run(reader: Conn) -> list[Record]:
            bodies = [b for (b,) in reader.execute(query, params)]
            return _records_decoder.decode(b"[" + b",".join(bodies) + b"]")  # type: ignore[arg-type]

        return await self._on_reader(run)

    async def query(
        self, statement: sql.Composed, params: Mapping[str, object]
    ) -> list[tuple[object, ...]]:
        """Run one read-only statement of this schema on the reader connection (listings,
        ``pglisting.py``); its rows."""
        self._check_open()

        def run(reader: Conn) -> list[tuple[object, ...]]:
            return reader.execute(statement, params).fetchall()

        return await self._on_reader(run)

    async def _on_reader(self, work: Callable[[Conn], T]) -> T:
        """``work`` on the reader connection, in a worker thread holding the read limiter.
        Reads are idempotent, so one that finds its connection gone (the server restarted,
        or closed it) runs again, once, on a new one: one lost connection costs a
        reconnect, not every later read (which used to fail until a write failed the log
        and the front reopened it)."""

        def attempt() -> T:
            reader = self._reader
            assert reader is not None, "opened by PostgresEventLog.open"
            if not reader.closed:
                try:
                    with self._read_watch.watching(reader) as was_cut:
                        return work(reader)
                except psycopg.OperationalError:
                    if not reader.broken or self._closed or was_cut():
                        raise  # a cut read is not run again: the server stopped answering
            log.warning("event_log_reader_reconnecting", schema=self.schema)
            with contextlib.suppress(psycopg.Error):
                reader.close()
            self._reader = reader = self._connect(autocommit=True)
            with self._read_watch.watching(reader):
                return work(reader)

        return await trio.to_thread.run_sync(attempt, limiter=self._read_limiter)

    async def aclose(self) -> None:
        """Flush queued appends, stop the writer and the tail, close subscriptions."""
        if self._closed:
            return
        self._close_subscriptions()
        self._queue.put(None)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._writer.join)
            await trio.to_thread.run_sync(self._tail.stop)
            # the reader as it is once no read runs (a read may have replaced it)
            await trio.to_thread.run_sync(self._close_reader, limiter=self._read_limiter)
            self._read_watch.stop()
