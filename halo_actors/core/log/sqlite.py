"""SQLite event log: WAL mode, one file per workspace, one writer thread with group commit.

Invariants:
- one connection writes, the writer's, and one side at a time uses it: the writer
  thread takes every batch of stamped records waiting in its queue (in seq order:
  ``append_nowait`` stamps and stages in one step on the trio thread), inserts them in
  one transaction and commits once (group commit; a batch of at most ``INSERT_ROWS``
  rows that does not move the session table's mark is one ``INSERT`` in autocommit mode,
  a transaction of its own), then hands the batch back to the trio thread, which
  publishes it in sequence order and wakes whoever waits for durability;
- **inline commits**: a staged group that someone waits for, small (at most
  ``INLINE_MAX_ROWS`` rows, ``INLINE_MAX_BYTES`` of bodies, ``INLINE_MAX_SESSIONS`` runs
  of one session's appends), while the writer thread holds nothing (``_in_flight``, kept
  on the trio thread, is 0: every group handed to it is back and published) is
  committed on the trio thread with the writer's connection, the same transaction, and
  published at once: no thread hand-off on a lone turn's commit. Everything else goes
  to the writer thread, so a stream's commits overlap its stamping. Never with
  ``synchronous`` FULL or EXTRA (an fsync would block the run loop). Seq order holds:
  a group goes inline only when every earlier one is published;
- records are flushed two scheduler passes after they were stamped (the flusher task,
  woken by the first append of a group, runs in the next pass and waits one more), in
  stamping order, all of one pass together: a task woken by the first append of a pass
  (a run started by a message) stamps its records before the flush, so a message and
  the turn it starts share one commit instead of two. A group of one session's records
  alone is flushed at once when that session's run ends (``flush_alone``): nothing else
  would share its commit;
- **a row is a batch**: the records of one session stamped one after another in one
  scheduler pass (one append, or several with no other session's between) are stored
  as one row of ``batches``, keyed by its last record's seq, its body the JSON array of
  the records: a turn's commit inserts one row, not one a record. A batch's seqs are
  contiguous, it holds at most ``BATCH_MAX_RECORDS`` records, and batches never overlap,
  so rows in key order are records in seq order; a read trims the first and last row it
  finds to its bounds and filters kinds (which are not a column) as it decodes;
- reads use their own connection in a worker thread (WAL lets them run beside
  the writer) and never see uncommitted rows;
- **fail-stop**: a commit that raises (anything, inline or on the writer thread)
  stops the writer: that batch, everything queued behind it and every later append
  fail with ``StoreFailed``, and nothing past the last good commit is ever published;
  the file stays as of that commit, which is what a reopen recovers (as after a crash);
- WAL checkpoints never run inside a commit: the writer's connection has
  ``wal_autocheckpoint=0`` and a checkpointer thread runs a passive checkpoint from
  its own connection after about every ``CHECKPOINT_PAGES`` pages written (inline
  commits count);
- after a crash the file reopens as of its last commit and numbering resumes
  after the largest stored seq; a program that ends without closing the log is such a
  crash, not a hang: the writer and checkpointer are daemon threads;
- the database is created ``0600`` (tightened when it exists) in a directory created
  ``0700`` (an existing ``.halo`` directory is tightened too, any other is left as it
  is: it may be shared); SQLite gives its ``-wal``/``-shm`` files the database's mode,
  so no other account on the machine can read the conversation;
- a log opened with ``read_only=True`` has no writer thread and never writes to
  the file (not even the schema): it serves reads and catch-up of what is stored,
  and refuses appends with ``StoreClosed``. Inspection tools and tests open a live
  server's file this way.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import trio

from halo_actors.core.logger import get_logger

from ..errors import StoreClosed, StoreFailed
from ..events import Event, Record, decode_records
from ..ids import root_of
from . import index
from .base import DEFAULT_MAX_EVENT_BYTES, LogBase
from .filter import EVERYTHING, EventFilter

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MAX_GROUP = 2_000
"""A commit takes no more staged groups once it holds this many records (the rest wait
for the next one); one group (one scheduler pass of appends) is never split."""
INLINE_MAX_ROWS = 32
"""A staged group someone waits for, of at most this many rows, ``INLINE_MAX_BYTES`` and
``INLINE_MAX_SESSIONS``, is committed on the trio thread when the writer thread holds
nothing (see the module doc); 0 turns inline commits off. A turn is about 9 rows of one
session (a commit of about 200 µs of CPU); a commit touching many sessions dirties a page
or two per session and is left to the writer thread (``docs/design/event-log.md``)."""
INLINE_MAX_BYTES = 32 * 1_024
INLINE_MAX_SESSIONS = 4
CHECKPOINT_PAGES = 1_000
"""About how many WAL pages the writer writes between two passive checkpoints."""
PAGE_BYTES = 4_096

BATCHES = """
CREATE TABLE IF NOT EXISTS batches (
    seq        INTEGER PRIMARY KEY,
    first_seq  INTEGER NOT NULL,
    session_id TEXT    NOT NULL,
    root       TEXT    NOT NULL,
    ts         INTEGER NOT NULL,
    body       BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS batches_by_session ON batches (session_id, seq);
CREATE INDEX IF NOT EXISTS batches_below_roots ON batches (root, seq) WHERE session_id != root;
"""
"""One row a batch (see the module doc): ``seq`` and ``ts`` are its last record's (the
largest of both), ``first_seq`` its first record's. A root's rows are indexed by session
only: a tree read is the root's rows (by session) merged with its descendants' (by tree)."""
_FROM_EVENTS = """
SELECT seq, seq, session_id, root, ts, CAST('[' || body || ']' AS BLOB) FROM events
"""
"""A file written before batches kept one record a row, in ``events``: each row is a
batch of one. A writable open moves them into ``batches`` once; a read-only one reads
them through a temporary view of that shape."""
BATCH_MAX_RECORDS = 64
"""A batch closes at this many records (or ``BATCH_MAX_BYTES`` of bodies): a read of one
record decodes its whole row. Reads bound a seq range by it (a row whose first seq is at
most N ends by N + BATCH_MAX_RECORDS - 1), so it may be raised but never lowered."""
BATCH_MAX_BYTES = 64 * 1_024
INSERT_ROWS = 32
"""Rows one ``INSERT`` statement takes (``VALUES (…), (…), …``): one statement step for
them all instead of one per row (about 2 µs a row less than ``executemany``); a commit
inserts in chunks of this many and one shorter chunk, so at most ``INSERT_ROWS``
distinct statements exist, all in the connection's statement cache."""
_COLUMNS = 6
_INSERTS = [
    "INSERT INTO batches (seq, first_seq, session_id, root, ts, body) VALUES "
    + ", ".join(["(?, ?, ?, ?, ?, ?)"] * n)
    for n in range(INSERT_ROWS + 1)
]

log = get_logger("halo_actors.log")


@dataclass(eq=False, slots=True)
class _Group:
    """The appends of one scheduler pass, in seq order: their records, and their batches'
    columns one after another (``_COLUMNS`` values a row, as an ``INSERT`` binds them; a
    row's body is the list of its records' bodies until it is committed)."""

    records: list[Record]
    values: list[object]
    body_bytes: int = 0
    runs: int = 0
    """Runs of one session's appends (a bound on the distinct sessions it touches)."""
    last_session: str = ""
    row_records: int = 0
    """Records in the last row (the one the next append of ``last_session`` may join)."""
    row_bytes: int = 0


def _connect(path: Path, synchronous: Synchronous) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _make_private(db: Path) -> None:
    """Create the directory ``0700`` and the database file ``0600`` (see the module doc)."""
    db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if db.parent.name == ".halo":
        os.chmod(db.parent, 0o700)
    os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
    for side in (db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(side, 0o600)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write (``mode=ro``); the file must exist."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    if "batches" not in tables and "events" in tables:  # a file from before batches
        columns = "seq, first_seq, session_id, root, ts, body"
        conn.execute(f"CREATE TEMP VIEW batches ({columns}) AS {_FROM_EVENTS}")
    return conn


class SqliteEventLog(LogBase):
    """Open with :meth:`open` (an async classmethod); close with :meth:`aclose`."""

    sync_reads = True

    def __init__(
        self,
        path: Path,
        *,
        synchronous: Synchronous,
        max_event_bytes: int,
        read_only: bool = False,
    ) -> None:
        super().__init__(max_event_bytes=max_event_bytes)
        self.path = path
        self.read_only = read_only
        self._synchronous: Synchronous = synchronous
        self._queue: queue.SimpleQueue[_Group | None] = queue.SimpleQueue()
        """Unbounded by design: ``append_nowait`` never blocks. Callers bound their own
        backlog: a producer waits for durability while the log is ``backlogged``."""
        self._staged: _Group | None = None
        """Stamped on the trio thread, not yet committed or handed to the writer (see the
        module doc); while not None, the flusher task is due to flush it."""
        self._flusher: trio.lowlevel.Task | None = None
        self._flusher_parked = False
        """True while the flusher task waits for a group to be staged (nothing is)."""
        self._flusher_scope = trio.CancelScope()
        self._conn: sqlite3.Connection | None = None
        """The writer's connection, set by the writer thread once it has connected. Used by
        one side at a time: the writer thread, or the trio thread while ``_in_flight`` is 0."""
        self._in_flight = 0
        """Groups handed to the writer thread and not back yet (trio thread only)."""
        self._pages = 0
        """About how many WAL pages were written since the last checkpoint was asked for
        (kept by whichever side holds the writer's connection)."""
        self._writer_error: BaseException | None = None
        """Why the writer thread stopped (writer side); once set, appends fail at once."""
        self._gate = threading.Lock()
        """Orders "queue an append" against "the writer failed and drained the queue"."""
        self._reader: sqlite3.Connection | None = None
        self._sync_reader: sqlite3.Connection | None = None
        """For :meth:`read_session_sync` only, used on the trio thread (made on first use)."""
        self._read_limiter = trio.CapacityLimiter(1)
        self._token = trio.lowlevel.current_trio_token()
        # daemon threads: a program that never closes its log still exits (what was
        # acknowledged is committed; an unfinished commit is rolled back on the next open)
        self._writer = threading.Thread(
            target=self._write_loop, name="halo-log-writer", daemon=True
        )
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="halo-log-checkpointer", daemon=True
        )
        self._checkpoint_due = threading.Event()
        self._stopping = False
        self.commits = 0
        """How many transactions the writer has committed (group-commit statistics)."""
        self.inline_commits = 0
        """How many of them were committed on the trio thread (see the module doc)."""
        self._inline = synchronous in ("NORMAL", "OFF")
        """Small commits may run on the trio thread: never where a commit waits for fsync."""
        self.checkpoints = 0
        """How many passive checkpoints the checkpointer has run."""
        self._table = index.TableWriter(0)
        """The session index's writer side (set on open from the file's table)."""

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        read_only: bool = False,
    ) -> SqliteEventLog:
        """Open (creating if needed) the log at ``path`` and start its writer thread.

        ``read_only``: open an existing file for reading only (see the module docstring).
        """
        db = Path(path)
        if not read_only:
            await trio.to_thread.run_sync(_make_private, db)
        log = cls(db, synchronous=synchronous, max_event_bytes=max_event_bytes, read_only=read_only)
        last_seq, last_ts = await trio.to_thread.run_sync(log._prepare)
        log._resume_from(last_seq, last_ts)
        if not read_only:
            log._writer.start()
            log._checkpointer.start()
            trio.lowlevel.spawn_system_task(log._flush_loop, name="halo-log-flusher")
        return log

    def _prepare(self) -> tuple[int, int]:
        if self.read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"no event log at {self.path}")
            self._reader = _connect_read_only(self.path)
        else:
            self._reader = _connect(self.path, self._synchronous)
            _create_batches(self._reader)
            self._reader.executescript(index.SCHEMA)
            self._table = index.open_table(self._reader)
        # ts never decreases along seq (``_stamp`` clamps it), so the last row has both
        row = self._reader.execute("SELECT seq, ts FROM batches ORDER BY seq DESC LIMIT 1")
        last_seq, last_ts = row.fetchone() or (0, 0)
        return int(last_seq), int(last_ts)

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        if self.read_only:
            raise StoreClosed("the event log is open read-only")
        self._check_writer()
        return super().append_nowait(session_id, *events)

    def _enqueue(self, session_id: str, records: list[Record], bodies: list[bytes]) -> None:
        # the writer was checked by append_nowait, on this thread, just before stamping
        group = self._staged
        if group is None:
            group = self._staged = _Group([], [])
            if self._flusher_parked:
                self._flusher_parked = False
                assert self._flusher is not None
                trio.lowlevel.reschedule(self._flusher)
        group.records += records
        size = sum(map(len, bodies))
        group.body_bytes += size
        values = group.values
        if group.last_session != session_id:
            group.runs += 1
            group.last_session = session_id
        elif (
            group.row_records + len(records) <= BATCH_MAX_RECORDS
            and group.row_bytes < BATCH_MAX_BYTES
        ):  # the session's batch goes on (nothing came between: its seqs stay contiguous)
            last = records[-1]
            values[-6], values[-2] = last.seq, last.ts
            values[-1] += bodies  # type: ignore[operator]  # a list of bodies until committed
            group.row_records += len(records)
            group.row_bytes += size
            return
        root = root_of(session_id)
        if len(records) <= BATCH_MAX_RECORDS:
            values += (records[-1].seq, records[0].seq, session_id, root, records[-1].ts, bodies)
            group.row_records, group.row_bytes = len(records), size
            return
        for start in range(0, len(records), BATCH_MAX_RECORDS):  # a long append: its rows
            part = bodies[start : start + BATCH_MAX_RECORDS]
            first, last = records[start], records[start + len(part) - 1]
            values += (last.seq, first.seq, session_id, root, last.ts, part)
        group.row_records, group.row_bytes = len(part), sum(map(len, part))

    async def _flush_loop(self) -> None:
        """The flusher (a system task): woken by the first append of a group, it runs in
        the next scheduler pass, waits one more pass so that every task made runnable with
        that append has stamped its records too, then flushes. No thread hand-off and no
        wake-up of the run loop's socket: a reschedule and a checkpoint."""

        def abort(_: object) -> trio.lowlevel.Abort:
            self._flusher_parked = False
            return trio.lowlevel.Abort.SUCCEEDED

        self._flusher = trio.lowlevel.current_task()
        with self._flusher_scope:
            while True:
                if self._staged is None:
                    self._flusher_parked = True
                    await trio.lowlevel.wait_task_rescheduled(abort)
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._flush()

    def flush_alone(self, session_id: str) -> None:
        """Flush the staged group now if it holds ``session_id``'s records alone (one run
        of one session's appends): a lone turn's commit one scheduler pass sooner."""
        group = self._staged
        if group is not None and group.runs == 1 and group.last_session == session_id:
            self._flush()

    def _flush(self) -> None:
        """Commit the staged appends inline or hand them to the writer, in order (trio
        thread; see the module doc). After the writer stopped they are dropped: the log
        failed, every waiter is told (fail-stop)."""
        group, self._staged = self._staged, None
        if group is None:
            return
        conn = self._conn
        if (
            conn is not None
            and self._inline
            and self._in_flight == 0
            and self._durable_waiters
            and len(group.records) <= INLINE_MAX_ROWS
            and group.runs <= INLINE_MAX_SESSIONS
            and group.body_bytes <= INLINE_MAX_BYTES
            and self._writer_error is None
        ):
            self._commit_inline(conn, group)
            return
        with self._gate:
            if self._writer_error is None:
                self._queue.put(group)
                self._in_flight += 1

    def _commit_inline(self, conn: sqlite3.Connection, group: _Group) -> None:
        """Commit a small group here, on the trio thread, with the writer's connection (the
        writer thread holds nothing: see ``_in_flight``), then publish it at once. A failure
        is the writer's failure (fail-stop): the writer thread is told to stop."""
        try:
            self._count_pages(self._commit(conn, [group]))
            self.inline_commits += 1
        except BaseException as exc:
            self._writer_failed(exc)
            self._queue.put(None)  # the writer thread, idle, stops; nothing else is queued
            return
        self._committed(group.records)

    def _count_pages(self, written: int) -> None:
        self._pages += written
        if self._pages >= CHECKPOINT_PAGES:
            self._pages = 0
            self._checkpoint_due.set()

    def _check_writer(self) -> None:
        if self._writer_error is not None:
            raise StoreFailed(f"the event log's writer stopped: {self._writer_error!r}")

    def _write_loop(self) -> None:
        """The writer thread. The first failure stops it (fail-stop); nobody is left waiting."""
        batch: list[_Group] = []
        try:
            conn = _connect(self.path, self._synchronous)
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's job, not a commit's
        except BaseException as exc:
            self._writer_failed(exc)
            return
        self._conn = conn
        try:
            while (first := self._queue.get()) is not None:
                batch = [first]
                stop = self._take_more(batch)
                self._count_pages(self._commit(conn, batch))
                self._token.run_sync_soon(self._batch_committed, batch)  # conn is free again
                batch = []
                if stop:
                    break
            # not after a failed inline commit: the summaries hold records the file lost
            if self._writer_error is None:
                self._table.write_behind(conn)
        except trio.RunFinishedError:
            pass  # the program ended without closing the log: committed, nobody to tell
        except BaseException as exc:
            self._writer_failed(exc)
        finally:
            conn.close()

    def _writer_failed(self, exc: BaseException) -> None:
        """Stop for good: drop everything queued, refuse later appends, tell the trio side."""
        log.error("event_log_writer_stopped", path=str(self.path), exc_info=exc)
        with self._gate:
            self._writer_error = exc
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
        with contextlib.suppress(trio.RunFinishedError):  # nobody left to tell
            self._token.run_sync_soon(self._fail_stop, exc)

    def _take_more(self, batch: list[_Group]) -> bool:
        """Greedily take queued groups up to ``MAX_GROUP`` rows; True if a stop was seen."""
        size = len(batch[0].records)
        while size < MAX_GROUP:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)
            size += len(item.records)
        return False

    def _commit(self, conn: sqlite3.Connection, batch: list[_Group]) -> int:
        """One transaction for the batch; returns about how many WAL pages it wrote: a
        lone ``INSERT`` (a transaction of its own, no ``BEGIN``/``COMMIT`` round) when the
        rows fit one statement and the session table is not due. Any error propagates:
        the writer stops (fail-stop)."""
        if len(batch) == 1:
            values, records = batch[0].values, batch[0].records
        else:
            values = [v for group in batch for v in group.values]
            records = [record for group in batch for record in group.records]
        table = self._table
        table_due = table.fold(conn, records)
        try:
            if len(values) <= INSERT_ROWS * _COLUMNS and not table_due:  # one statement
                _insert(conn, _bound(values))
            else:
                conn.execute("BEGIN IMMEDIATE")
                _insert(conn, _bound(values))
                if table_due:
                    table.write(conn)
                conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
            raise
        self.commits += 1
        written = sum(group.body_bytes for group in batch)
        return 3 + 2 * written // PAGE_BYTES  # a table leaf and two index leaves at least

    def _batch_committed(self, batch: list[_Group]) -> None:
        """On the trio thread, in commit order."""
        self._in_flight -= len(batch)
        if len(batch) == 1:
            self._committed(batch[0].records)
        else:
            self._committed([record for group in batch for record in group.records])

    def _checkpoint_loop(self) -> None:
        """Passive checkpoints off the commit path: never blocks the writer or a reader.
        A failed checkpoint is logged and retried at the next one (the WAL only grows)."""
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._checkpoint_due.wait()
                self._checkpoint_due.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = _connect(self.path, self._synchronous)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                except sqlite3.Error as exc:
                    log.warning("event_log_checkpoint_failed", path=str(self.path), error=repr(exc))
        finally:
            if conn is not None:
                conn.close()

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        self._check_open()
        reader = self._reader
        assert reader is not None, "opened by SqliteEventLog.open"

        return await trio.to_thread.run_sync(
            _read, reader, flt, after_seq, until_seq, limit, limiter=self._read_limiter
        )

    async def session_index(self, root: str | None = None) -> list[index.SessionSummary]:
        """From the ``sessions`` table (kept by the writer), not a scan of the records."""
        self._check_open()
        reader = self._reader
        assert reader is not None, "opened by SqliteEventLog.open"
        if not self._has_index(reader):  # a read-only file from before the index
            return await super().session_index(root)
        return await trio.to_thread.run_sync(
            index.read_table, reader, root, limiter=self._read_limiter
        )

    @staticmethod
    def _has_index(conn: sqlite3.Connection) -> bool:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone()
        return found is not None

    def read_session_sync(self, session_id: str) -> list[Record]:
        """On the calling (trio) thread, from a connection of its own: one indexed query."""
        self._check_open()
        if self._sync_reader is None:
            self._sync_reader = (
                _connect_read_only(self.path)
                if self.read_only
                else _connect(self.path, self._synchronous)
            )
        return _read(self._sync_reader, EventFilter(session_id=session_id), 0, None, None)

    async def aclose(self) -> None:
        """Commit what is queued, stop the writer and checkpointer, close everything."""
        if self._closed:
            return
        self._close_subscriptions()
        self._flush()  # what is staged is committed before the writer stops
        self._flusher_scope.cancel()
        self._queue.put(None)
        with trio.CancelScope(shield=True):
            if self._writer.ident is not None:  # started (a read-only log has none)
                await trio.to_thread.run_sync(self._writer.join)
                self._stopping = True
                self._checkpoint_due.set()
                await trio.to_thread.run_sync(self._checkpointer.join)
            if self._reader is not None:
                await trio.to_thread.run_sync(self._reader.close, limiter=self._read_limiter)
            if self._sync_reader is not None:
                self._sync_reader.close()


def _create_batches(conn: sqlite3.Connection) -> None:
    """The ``batches`` table and its indexes; a file from before them has its ``events``
    rows moved in, once, in one transaction (see ``_FROM_EVENTS``)."""
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    if "batches" in tables:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in filter(str.strip, BATCHES.split(";")):
            conn.execute(statement)
        if "events" in tables:
            conn.execute(f"INSERT INTO batches {_FROM_EVENTS}")
            conn.execute("DROP TABLE events")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _bound(values: list[object]) -> list[object]:
    """``values`` with each row's list of bodies made its blob, the records' JSON array (a
    bytearray binds as a blob as it is; bytes go through sqlite3's adapter lookup first)."""
    for i in range(_COLUMNS - 1, len(values), _COLUMNS):
        blob = bytearray(b"[")
        blob += b",".join(values[i])  # type: ignore[arg-type]
        blob += b"]"
        values[i] = blob
    return values


def _insert(conn: sqlite3.Connection, values: list[object]) -> None:
    """Insert the rows whose columns ``values`` holds, ``INSERT_ROWS`` a statement."""
    chunk = INSERT_ROWS * _COLUMNS
    if len(values) <= chunk:
        conn.execute(_INSERTS[len(values) // _COLUMNS], values)
        return
    for start in range(0, len(values), chunk):
        part = values[start : start + chunk]
        conn.execute(_INSERTS[len(part) // _COLUMNS], part)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int64(value: int) -> int:
    """SQLite integers are 64-bit; a bound past that range means the same as its edge."""
    return min(max(value, _INT64[0]), _INT64[1])


def _read(
    conn: sqlite3.Connection,
    flt: EventFilter,
    after_seq: int,
    until_seq: int | None,
    limit: int | None,
) -> list[Record]:
    """The stored records matching ``flt`` with ``after_seq < seq <= until_seq``, by seq, at
    most ``limit``: the rows holding them, the first and last trimmed to the bounds, kinds
    and times filtered record by record. With a filter that can leave a row with nothing
    (kinds, a time), a ``limit`` is met page by page, ``limit`` rows a page."""
    after = after_seq
    if flt.since_ts is not None:
        after = max(after, _first_seq_at(conn, flt.since_ts) - 1)
    sifted = flt.kinds is not None or flt.since_ts is not None
    out: list[Record] = []
    while True:
        sql, params = _select(flt, after, until_seq, limit)
        rows = conn.execute(sql, params).fetchall()
        records = [record for row in rows for record in decode_records(row[-1])]
        start, end = 0, len(records)
        while start < end and records[start].seq <= after:
            start += 1
        while until_seq is not None and end > start and records[end - 1].seq > until_seq:
            end -= 1
        records = records[start:end]
        out += [r for r in records if flt.matches(r)] if sifted else records
        if limit is None or len(out) >= limit or len(rows) < limit:
            return out if limit is None else out[:limit]
        after = rows[-1][0]


def _first_seq_at(conn: sqlite3.Connection, since_ts: int) -> int:
    """The first seq of the first batch with a record stamped at or after ``since_ts`` (one
    past the last if none): a binary search by seq, since ts never decreases along seq and a
    row's ``ts`` is its last record's; no index on ts to keep in every commit. About
    2·log2(rows) point reads."""
    first = "SELECT seq, ts FROM batches WHERE seq >= ? ORDER BY seq LIMIT 1"
    lo = 1
    row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM batches").fetchone()
    hi = int(row[0]) + 1
    since = _int64(since_ts)
    while lo < hi:
        mid = (lo + hi) // 2
        found = conn.execute(first, (mid,)).fetchone()
        if found is None or found[1] >= since:
            hi = mid
        else:
            lo = found[0] + 1
    return lo


def _select(
    flt: EventFilter, after_seq: int, until_seq: int | None, limit: int | None
) -> tuple[str, list[object]]:
    """The query of the batches holding ``flt``'s records past ``after_seq`` (and up to
    ``until_seq``), in seq order, at most ``limit`` rows; each row is ``(seq, body)``.

    A whole tree (``tree`` without ``session_id``) is two index ranges merged by seq:
    the root's own rows (``batches_by_session``) and its descendants' (the partial
    ``batches_below_roots``, which leaves out every root's rows: they are indexed once,
    by session). SQLite merges the two ordered arms without sorting (``MERGE (UNION
    ALL)``), so a ``LIMIT`` stops both early."""
    where: list[str] = ["seq > ?"]
    params: list[object] = [_int64(after_seq)]
    if until_seq is not None:  # a row that starts by until_seq ends BATCH_MAX_RECORDS later
        where.append("seq < ? AND first_seq <= ?")
        params += (_int64(until_seq + BATCH_MAX_RECORDS), _int64(until_seq))
    if flt.since_ts is not None:  # a row's ts is its last record's: the largest
        where.append("ts >= ?")
        params.append(_int64(flt.since_ts))
    common = " AND ".join(where)
    if flt.session_id is not None:
        sql = f"SELECT seq, body FROM batches WHERE session_id = ? AND {common}"
        params.insert(0, flt.session_id)
        if flt.tree is not None:
            sql += " AND root = ?"
            params.append(flt.tree)
    elif flt.tree is not None:
        sql = (
            f"SELECT seq, body FROM batches WHERE session_id = ? AND {common} UNION ALL "
            f"SELECT seq, body FROM batches WHERE root = ? AND session_id != root AND {common}"
        )
        params = [flt.tree, *params, flt.tree, *params]
    else:
        sql = f"SELECT seq, body FROM batches WHERE {common}"
    sql += " ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {_int64(int(limit))}"
    return sql, params
