"""SQLite event log: WAL mode, one file per workspace, one writer thread with group commit.

Invariants:
- one connection writes, the writer's, and one side at a time uses it: the writer
  thread takes every batch of stamped records waiting in its queue (in seq order:
  ``append_nowait`` stamps and stages in one step on the trio thread), inserts them in
  one transaction and commits once (group commit; a batch of at most ``INSERT_ROWS``
  rows that does not move the session table's mark is one ``INSERT`` in autocommit mode,
  a transaction of its own), then hands the batch back to the trio thread, which
  publishes its unjournaled groups (see below) in sequence order and wakes whoever
  waits for durability;
- **a commit is a journal write**: a flushed group (every earlier one published) is
  written as one frame to the journal (``journal.py``) with one ``write()`` on the trio
  thread, published at once, and handed to the writer thread, which inserts it into
  SQLite behind (*indexes* it) and hands it back; SQLite is then the index of a prefix
  of the log, and the journal holds the rest. As durable as SQLite's own WAL commit with
  ``synchronous=NORMAL``: a killed process loses nothing written. Not with ``FULL`` or
  ``EXTRA`` (they ask for an fsync a commit), and not while the journal holds
  ``JOURNAL_CUT_BYTES`` or ``MAX_UNINDEXED`` unindexed records: a group then goes to the
  writer thread unjournaled and is published once SQLite has committed it (and every
  later group goes that way until it is published: publication stays in seq order).
  Journaled groups are handed to the writer ``INDEX_BATCH`` records at a time (and
  before an unjournaled one, on close, and when someone waits for the index). The
  journal is cut once everything in it is indexed and the WAL synced;
- **reads are exact**: a read takes, on the trio thread, the records journaled but not
  yet indexed (from seq T on), reads SQLite below T and appends those; a read-only open
  (another process) reads the journal file first, then SQLite and its largest seq in
  one read transaction, and takes the journal's records past that seq; the ``sessions``
  table is read once it has caught up with ``last_seq``;
- **recovery**: an open indexes the journal's valid frames past the largest stored seq
  (one transaction), syncs the WAL and cuts the journal;
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
- **fail-stop**: a journal write or a commit that raises stops the writer: every
  later append fails with ``StoreFailed`` and nothing unpublished is ever published (a
  group the failed write held, and every unjournaled group queued); what was published
  is in the journal or in SQLite, which is what a reopen recovers (as after a crash);
- WAL checkpoints never run inside a commit: the writer's connection has
  ``wal_autocheckpoint=0`` and a checkpointer thread runs a passive checkpoint from
  its own connection after about every ``CHECKPOINT_PAGES`` pages written;
- after a crash the file reopens as of its last commit plus the journal's valid
  frames, and numbering resumes after the largest seq of either; a program that ends
  without closing the log is such a crash, not a hang: the writer and checkpointer are
  daemon threads;
- the database is created ``0600`` (tightened when it exists) in a directory created
  ``0700`` (an existing ``.halo`` directory is tightened too, any other is left as it
  is: it may be shared); SQLite gives its ``-wal``/``-shm`` files the database's mode,
  so no other account on the machine can read the conversation;
- a log opened with ``read_only=True`` has no writer thread and never writes to
  the file or its journal (not even the schema): it serves reads and catch-up of what is stored,
  and refuses appends with ``StoreClosed``. Inspection tools and tests open a live
  server's file this way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import sqlite3
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast
from urllib.parse import quote

import trio

from halo_actors.core.logger import get_logger

from ..errors import StoreClosed, StoreFailed
from ..events import Event, Record, decode_records
from ..ids import root_of
from . import index
from .base import DEFAULT_MAX_EVENT_BYTES, MAX_BACKLOG, LogBase
from .filter import EVERYTHING, EventFilter
from .journal import Journal, journal_path, read_journal, read_rows, rows_in, sync_file

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MAX_GROUP = 2_000
"""A commit takes no more staged groups once it holds this many records (the rest wait
for the next one); one group (one scheduler pass of appends) is never split."""
JOURNAL_CUT_BYTES = 4 * 1_024 * 1_024
"""A journal this large takes no more frames until it is cut: groups go to the writer
thread unjournaled, which indexes what the journal holds ahead of them, syncs the WAL
and hands them back; then the journal is empty and is cut (one ``fsync`` and a few
milliseconds of unjournaled commits about every this many bytes)."""
INDEX_BATCH = 1_000
"""Journaled records given to the writer thread to index together, in one transaction:
indexing is off every latency path, and a transaction of many rows costs far less a row
(and wakes the run loop once) than one a commit."""
INLINE_INDEX_MAX = 4 * INDEX_BATCH
"""More journaled records than this are indexed on the writer thread (a burst), fewer on
the trio thread (see ``_index_journaled``)."""
MAX_UNINDEXED = MAX_BACKLOG
"""Records journaled and not yet indexed past which groups go to SQLite unjournaled:
their publication then waits for the writer, which bounds what producers run ahead
(``backlogged``) and what reads merge from memory."""
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
    journaled: bool = False
    """Written to the journal (and published); the writer thread only indexes it."""


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
    for side in (
        db,
        *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal", "-halo-journal")),
    ):
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
        self._wal = path.with_name(path.name + "-wal")
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
        self._journal: Journal | None = None
        """Where groups are committed (see the module doc); None when read-only, or when
        ``synchronous`` asks for an fsync a commit."""
        self._unindexed: deque[_Group] = deque()
        """Journaled groups not yet back from the writer thread, in seq order (trio thread)."""
        self._unindexed_records = 0
        self._handed = 0
        """How many of ``_unindexed`` (its first ones) the writer thread has been given."""
        self._to_index = 0
        """Records of the rest: handed over once ``INDEX_BATCH`` of them wait (or when
        someone waits for the index, or an unjournaled group must follow them)."""
        self._indexed = trio.Event()
        """Set (and replaced) when the writer thread hands a batch back."""
        self._unpublished = 0
        """Unjournaled groups handed to the writer thread and not back yet (trio thread);
        while any is, no group is journaled (publication stays in seq order)."""
        self._sync_wanted = False
        self._conn: sqlite3.Connection | None = None
        """The writer's connection, set by the writer thread once it has connected. Used by
        one side at a time: the writer thread, or the trio thread while the writer thread
        holds nothing (``_handed`` and ``_unpublished`` are 0)."""
        self.inline_commits = 0
        """How many of the index commits ran on the trio thread."""
        """Set by the trio thread while the journal is due to be cut: the writer thread
        syncs the WAL after each commit, so that the next batch back may allow the cut."""
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
        """How many times appends were made durable: journal writes, and transactions of
        unjournaled groups (group-commit statistics)."""
        self.index_commits = 0
        """How many transactions indexed journaled groups (on either thread)."""
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
        if not read_only and synchronous in ("NORMAL", "OFF"):
            log._journal = Journal(journal_path(db))
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
        rows = list(read_rows(journal_path(self.path), int(last_seq)))
        if not self.read_only:
            self._recover(rows)
        if rows:
            last = rows[-1][0][-1]
            return last.seq, last.ts
        return int(last_seq), int(last_ts)

    def _recover(self, rows: list[tuple[list[Record], bytes]]) -> None:
        """Index the journal's frames past the largest stored seq (what a crash left
        unindexed), sync the WAL, then cut the journal (on open, before any append; a
        journal of frames all indexed already, from a crash between the two, is cut too)."""
        assert self._reader is not None
        if rows:
            self._index_rows(self._reader, rows)
        journal = journal_path(self.path)
        if journal.exists() and journal.stat().st_size:
            sync_file(self._wal)
            os.truncate(journal, 0)

    def _index_rows(self, conn: sqlite3.Connection, rows: list[tuple[list[Record], bytes]]) -> None:
        """Insert the journal's ``rows`` as they are, in one commit (not counted: on open)."""
        group = _Group([], [])
        for records, body in rows:
            first, last = records[0], records[-1]
            group.records += records
            group.values += (
                last.seq,
                first.seq,
                last.session_id,
                root_of(last.session_id),
                last.ts,
                body,
            )
        self._commit(conn, [group])
        self.commits = 0

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
        """Commit the staged appends: journal them and publish them at once, or (see the
        module doc) hand them to the writer thread unjournaled; trio thread. After the
        writer stopped they are dropped: the log failed, every waiter is told (fail-stop)."""
        group, self._staged = self._staged, None
        if group is None or self._writer_error is not None:
            return
        journal = self._journal
        if (
            journal is not None
            and self._conn is not None  # the writer thread is up: the index can follow
            and not self._unpublished
            and self._unindexed_records < MAX_UNINDEXED
            and journal.size < JOURNAL_CUT_BYTES
        ):
            records = group.records
            bodies = cast("list[bytes]", _bound(group.values)[_COLUMNS - 1 :: _COLUMNS])
            try:
                journal.write(records[0].seq, records[-1].seq, bodies)
            except BaseException as exc:
                self._writer_failed(exc)
                self._queue.put(None)  # the writer thread stops once it has drained
                return
            group.journaled = True
            self.commits += 1
            self._unindexed.append(group)
            self._unindexed_records += len(records)
            self._to_index += len(records)
            self._committed(records)
            if self._to_index >= INDEX_BATCH:
                self._index_journaled()
            return
        self._sync_wanted = journal is not None and journal.size >= JOURNAL_CUT_BYTES
        self._hand_over(group)

    def _index_journaled(self) -> None:
        """Index what the journal holds: here, in one transaction with the writer's
        connection, when the writer thread holds nothing and it is at most
        ``INLINE_INDEX_MAX`` records (one short pause of the run loop, and no thread
        hand-off, whose GIL traffic costs every task more than the commit); else on the
        writer thread. A failed commit here is the writer's failure (fail-stop)."""
        conn = self._conn
        if conn is None or self._handed or self._unpublished or self._to_index > INLINE_INDEX_MAX:
            self._hand_over()
            return
        groups = list(self._unindexed)
        try:
            self._count_pages(self._commit(conn, groups))
        except BaseException as exc:
            self._writer_failed(exc)
            self._queue.put(None)  # the writer thread, idle, stops; nothing else is queued
            return
        self.inline_commits += 1
        self._unindexed.clear()
        self._unindexed_records = self._to_index = 0
        self._indexed.set()
        self._indexed = trio.Event()

    def _hand_over(self, direct: _Group | None = None) -> None:
        """Give the writer thread the journaled groups it has not had yet (to index, in
        one transaction), then ``direct`` (unjournaled: to commit, then publish)."""
        with self._gate:
            if self._writer_error is not None:
                return
            if self._to_index:
                for group in itertools.islice(self._unindexed, self._handed, None):
                    self._queue.put(group)
                self._handed = len(self._unindexed)
                self._to_index = 0
            if direct is not None:
                self._queue.put(direct)
                self._unpublished += 1

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
                synced = self._sync_wanted
                if synced:  # the journal is due to be cut: what it holds must be on disk
                    sync_file(self._wal)
                self._token.run_sync_soon(self._batch_committed, batch, synced)
                batch = []
                if stop:
                    break
            # not after a failed commit: the summaries hold records the file lost
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
            values, records = _bound(batch[0].values), batch[0].records
        else:
            values = [v for group in batch for v in _bound(group.values)]
            records = [record for group in batch for record in group.records]
        table = self._table
        table_due = table.fold(conn, records)
        try:
            if len(values) <= INSERT_ROWS * _COLUMNS and not table_due:  # one statement
                _insert(conn, values)
            else:
                conn.execute("BEGIN IMMEDIATE")
                _insert(conn, values)
                if table_due:
                    table.write(conn)
                conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
            raise
        journaled = sum(group.journaled for group in batch)
        self.commits += journaled < len(batch)
        self.index_commits += journaled > 0
        written = sum(group.body_bytes for group in batch)
        return 3 + 2 * written // PAGE_BYTES  # a table leaf and two index leaves at least

    def _batch_committed(self, batch: list[_Group], synced: bool) -> None:
        """On the trio thread, in commit order: the batch is in SQLite. Its unjournaled
        groups are published; its journaled ones (published already) leave the journal's
        unindexed tail, and once that tail is empty and the WAL was synced after this
        commit (``synced``), a journal due to be cut is cut."""
        fresh: list[Record] = []
        for group in batch:
            if group.journaled:
                done = self._unindexed.popleft()
                assert done is group, "the writer indexes groups in journal order"
                self._handed -= 1
                self._unindexed_records -= len(group.records)
            else:
                self._unpublished -= 1
                fresh += group.records
        self._committed(fresh)
        self._indexed.set()
        self._indexed = trio.Event()
        journal = self._journal
        if journal is not None:
            if synced and not self._unindexed and self._writer_error is None:
                journal.cut()
            self._sync_wanted = journal.size >= JOURNAL_CUT_BYTES

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
        if self.read_only:
            return await trio.to_thread.run_sync(
                _read_beside_journal,
                reader,
                self.path,
                flt,
                after_seq,
                until_seq,
                limit,
                limiter=self._read_limiter,
            )
        tail = self._unindexed_tail()
        indexed = until_seq if not tail else _below(tail[0].seq, until_seq)
        out = []
        if indexed is None or indexed > after_seq:
            out = await trio.to_thread.run_sync(
                _read, reader, flt, after_seq, indexed, limit, limiter=self._read_limiter
            )
        return _joined(out, tail, flt, after_seq, until_seq, limit)

    async def session_index(self, root: str | None = None) -> list[index.SessionSummary]:
        """From the ``sessions`` table (kept by the writer), not a scan of the records, once
        the table holds everything published when asked; a scan after a failure (the
        table will not catch up) or of a read-only file whose journal holds records."""
        self._check_open()
        reader = self._reader
        assert reader is not None, "opened by SqliteEventLog.open"
        if not await self.wait_indexed():
            return await super().session_index(root)
        if not self._has_index(reader) or (self.read_only and self._journal_tail_exists()):
            return await super().session_index(root)
        return await trio.to_thread.run_sync(
            index.read_table, reader, root, limiter=self._read_limiter
        )

    async def wait_indexed(self) -> bool:
        """Until everything published when called is in SQLite (not only in the journal);
        False if it never will be in this process (the log failed: a reopen indexes it).
        For a reader of the raw file, and for the session index."""
        asked = self._published_seq
        if self._to_index:
            self._index_journaled()
        while self._unindexed and self._unindexed[0].records[0].seq <= asked:
            if self._failure is not None:
                return False
            await self._indexed.wait()
        await trio.lowlevel.checkpoint()
        return self._failure is None or not self._unindexed

    def _unindexed_tail(self) -> list[Record]:
        """The records journaled and not yet in SQLite, in seq order (trio thread)."""
        return [record for group in self._unindexed for record in group.records]

    def _journal_tail_exists(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            return journal_path(self.path).stat().st_size > 0
        return False

    def _fail_stop(self, cause: BaseException) -> None:
        super()._fail_stop(cause)
        self._indexed.set()  # whoever waits for the index: it will not catch up

    @staticmethod
    def _has_index(conn: sqlite3.Connection) -> bool:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone()
        return found is not None

    def read_session_sync(self, session_id: str) -> list[Record]:
        """On the calling (trio) thread, from a connection of its own: one indexed query
        (and the journal's unindexed tail, as :meth:`read`)."""
        self._check_open()
        if self._sync_reader is None:
            self._sync_reader = (
                _connect_read_only(self.path)
                if self.read_only
                else _connect(self.path, self._synchronous)
            )
        flt = EventFilter(session_id=session_id)
        if self.read_only:
            return _read_beside_journal(self._sync_reader, self.path, flt, 0, None, None)
        tail = self._unindexed_tail()
        indexed = None if not tail else tail[0].seq - 1
        out = _read(self._sync_reader, flt, 0, indexed, None)
        return _joined(out, tail, flt, 0, None, None)

    async def aclose(self) -> None:
        """Commit what is queued, stop the writer and checkpointer, close everything."""
        if self._closed:
            return
        self._close_subscriptions()
        self._flush()  # what is staged is committed before the writer stops
        self._hand_over()  # and what is journaled, indexed
        self._flusher_scope.cancel()
        self._queue.put(None)
        with trio.CancelScope(shield=True):
            if self._writer.ident is not None:  # started (a read-only log has none)
                await trio.to_thread.run_sync(self._writer.join)
                self._stopping = True
                self._checkpoint_due.set()
                await trio.to_thread.run_sync(self._checkpointer.join)
            if self._journal is not None:
                await trio.to_thread.run_sync(self._close_journal)
            if self._reader is not None:
                await trio.to_thread.run_sync(self._reader.close, limiter=self._read_limiter)
            if self._sync_reader is not None:
                self._sync_reader.close()

    def _close_journal(self) -> None:
        """After the writer stopped: cut the journal if all of it is indexed (synced first),
        else leave it for the next open to recover (the writer failed)."""
        journal = self._journal
        assert journal is not None
        if journal.size and not self._unindexed and self._writer_error is None:
            sync_file(self._wal)
            journal.cut()
        journal.close()


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
    bytearray binds as a blob as it is; bytes go through sqlite3's adapter lookup first);
    a row bound already (a journaled group's) is left as it is."""
    for i in range(_COLUMNS - 1, len(values), _COLUMNS):
        if type(values[i]) is not list:
            continue
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


def _below(seq: int, until_seq: int | None) -> int:
    """The upper bound of a read of SQLite when the journal's unindexed tail starts at seq."""
    return seq - 1 if until_seq is None else min(until_seq, seq - 1)


def _joined(
    indexed: list[Record],
    tail: list[Record],
    flt: EventFilter,
    after_seq: int,
    until_seq: int | None,
    limit: int | None,
) -> list[Record]:
    """``indexed`` (read from SQLite, all below ``tail``) followed by the records of
    ``tail`` that the read asks for, up to ``limit`` in all."""
    out = indexed
    for record in tail:
        if limit is not None and len(out) >= limit:
            break
        if until_seq is not None and record.seq > until_seq:
            break
        if record.seq > after_seq and flt.matches(record):
            out.append(record)
    return out


def _read_beside_journal(
    conn: sqlite3.Connection,
    db: Path,
    flt: EventFilter,
    after_seq: int,
    until_seq: int | None,
    limit: int | None,
) -> list[Record]:
    """:func:`_read` for a read-only open: the journal file first, then SQLite and its
    largest seq in one read transaction, then the journal's records past that seq (a cut
    happens only once all of them are in SQLite, so the two leave no gap between them)."""
    journal = read_journal(journal_path(db))  # first: see the docstring
    conn.execute("BEGIN")
    try:
        stored = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM batches").fetchone()[0])
        out = _read(conn, flt, after_seq, _below(stored + 1, until_seq), limit)
    finally:
        conn.execute("COMMIT")
    tail = [record for records, _ in rows_in(journal, stored) for record in records]
    if tail and tail[0].seq != stored + 1:
        raise StoreFailed(f"the journal of {db} starts at seq {tail[0].seq}, after {stored}")
    return _joined(out, tail, flt, after_seq, until_seq, limit)


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
