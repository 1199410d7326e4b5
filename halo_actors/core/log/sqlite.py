"""SQLite event log: WAL mode, one file per workspace, one writer thread with group commit.

Invariants:
- only the writer thread writes; it takes every append waiting in its queue,
  inserts them in one transaction and commits once (group commit), then hands
  the batch back to the trio thread, which publishes it in sequence order and
  wakes the appenders;
- an appender waits for its commit under a shield: once queued, an append is
  reported only after it is durable (or failed);
- reads use their own connection in a worker thread (WAL lets them run beside
  the writer) and never see uncommitted rows;
- after a crash the file reopens as of its last commit and numbering resumes
  after the largest stored seq;
- no appender waits forever: a commit that raises fails only its own batch
  (``StoreFailed``; the writer goes on), and if the writer thread itself stops on
  an unexpected error, every queued append and every later one fails with
  ``StoreFailed`` instead of waiting for a writer that is gone;
- a log opened with ``read_only=True`` has no writer thread and never writes to
  the file (not even the schema): it serves reads and catch-up of what is stored,
  and refuses appends with ``StoreClosed``. Inspection tools and tests open a live
  server's file this way.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import msgspec
import trio

from halo_actors.core.logger import get_logger

from ..errors import StoreClosed, StoreFailed
from ..events import Event, Record
from ..ids import root_of
from .base import DEFAULT_MAX_EVENT_BYTES, LogBase
from .filter import EVERYTHING, EventFilter

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
MAX_GROUP = 2_000
"""Most records one commit takes; the rest wait for the next one."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT    NOT NULL,
    root       TEXT    NOT NULL,
    ts         INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    body       BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, seq);
CREATE INDEX IF NOT EXISTS events_by_root ON events (root, seq);
CREATE INDEX IF NOT EXISTS events_by_ts ON events (ts);
"""
_INSERT = "INSERT INTO events (seq, session_id, root, ts, kind, body) VALUES (?, ?, ?, ?, ?, ?)"
_records_decoder = msgspec.json.Decoder(list[Record])

Row = tuple[int, str, str, int, str, bytes]
log = get_logger("halo_actors.log")


@dataclass(eq=False)
class _Pending:
    records: list[Record]
    rows: list[Row]
    done: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None


def _connect(path: Path, synchronous: Synchronous) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write (``mode=ro``); the file must exist."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


class SqliteEventLog(LogBase):
    """Open with :meth:`open` (an async classmethod); close with :meth:`aclose`."""

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
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._failed: BaseException | None = None
        """Why the writer thread stopped early; once set, appends fail at once."""
        self._gate = threading.Lock()
        """Orders "queue an append" against "the writer failed and drained the queue"."""
        self._reader: sqlite3.Connection | None = None
        self._read_limiter = trio.CapacityLimiter(1)
        self._token = trio.lowlevel.current_trio_token()
        self._writer = threading.Thread(target=self._write_loop, name="halo-log-writer")
        self.commits = 0
        """How many transactions the writer has committed (group-commit statistics)."""

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
            db.parent.mkdir(parents=True, exist_ok=True)
        log = cls(db, synchronous=synchronous, max_event_bytes=max_event_bytes, read_only=read_only)
        last_seq, last_ts = await trio.to_thread.run_sync(log._prepare)
        log._resume_from(last_seq, last_ts)
        if not read_only:
            log._writer.start()
        return log

    def _prepare(self) -> tuple[int, int]:
        if self.read_only:
            if not self.path.is_file():
                raise FileNotFoundError(f"no event log at {self.path}")
            self._reader = _connect_read_only(self.path)
        else:
            self._reader = _connect(self.path, self._synchronous)
            self._reader.executescript(_SCHEMA)
        row = self._reader.execute("SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(ts), 0) FROM events")
        last_seq, last_ts = row.fetchone()
        return int(last_seq), int(last_ts)

    async def append(self, session_id: str, *events: Event) -> list[Record]:
        if self.read_only:
            raise StoreClosed("the event log is open read-only")
        self._check_writer()
        stamped = self._stamp(session_id, events)
        root = root_of(session_id)
        rows: list[Row] = [
            (r.seq, session_id, root, r.ts, r.event.__struct_config__.tag, body)  # type: ignore[misc]
            for r, body in stamped
        ]
        pending = _Pending([r for r, _ in stamped], rows)
        with self._gate:
            self._check_writer()
            self._queue.put(pending)
        with trio.CancelScope(shield=True):
            await pending.done.wait()
        if pending.error is not None:
            raise StoreFailed(f"the event log could not commit: {pending.error!r}") from None
        return pending.records

    def _check_writer(self) -> None:
        if self._failed is not None:
            raise StoreFailed(f"the event log's writer stopped: {self._failed!r}")

    def _write_loop(self) -> None:
        """The writer thread. Whatever stops it early, no appender is left waiting."""
        batch: list[_Pending] = []
        try:
            conn = _connect(self.path, self._synchronous)
        except BaseException as exc:
            self._writer_failed(exc, batch)
            return
        try:
            while (first := self._queue.get()) is not None:
                batch = [first]
                stop = self._take_more(batch)
                self._commit(conn, batch)
                self._token.run_sync_soon(self._committed, batch)
                batch = []
                if stop:
                    break
        except BaseException as exc:
            self._writer_failed(exc, batch)
        finally:
            conn.close()

    def _writer_failed(self, exc: BaseException, batch: list[_Pending]) -> None:
        """Fail the batch in hand and everything queued; later appends fail at once."""
        log.error("event_log_writer_stopped", path=str(self.path), exc_info=exc)
        with self._gate:
            self._failed = exc
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    batch.append(item)
        for pending in batch:
            pending.error = pending.error or exc
        if batch:
            with contextlib.suppress(trio.RunFinishedError):  # nobody left to wake
                self._token.run_sync_soon(self._committed, batch)

    def _take_more(self, batch: list[_Pending]) -> bool:
        """Greedily take queued appends up to ``MAX_GROUP`` rows; True if a stop was seen."""
        size = len(batch[0].rows)
        while size < MAX_GROUP:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)
            size += len(item.rows)
        return False

    def _commit(self, conn: sqlite3.Connection, batch: list[_Pending]) -> None:
        """One transaction for the batch; any error fails the whole batch, not the writer."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            for pending in batch:
                conn.executemany(_INSERT, pending.rows)
            conn.execute("COMMIT")
            self.commits += 1
        except Exception as exc:
            for pending in batch:
                pending.error = exc
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # if this raises too, the writer stops (see above)

    def _committed(self, batch: list[_Pending]) -> None:
        """On the trio thread, in commit order: publish, then wake the appenders."""
        for pending in batch:
            if pending.error is None:
                self._publish(pending.records)
            pending.done.set()

    async def read(
        self,
        flt: EventFilter = EVERYTHING,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        self._check_open()
        sql, params = _select(flt, after_seq, until_seq, limit)

        reader = self._reader
        assert reader is not None, "opened by SqliteEventLog.open"

        def run() -> list[Record]:
            bodies = [b for (b,) in reader.execute(sql, params)]
            return _records_decoder.decode(b"[" + b",".join(bodies) + b"]")

        return await trio.to_thread.run_sync(run, limiter=self._read_limiter)

    async def aclose(self) -> None:
        """Flush queued appends, stop the writer, close subscriptions and connections."""
        if self._closed:
            return
        self._close_subscriptions()
        self._queue.put(None)
        with trio.CancelScope(shield=True):
            if self._writer.ident is not None:  # started (a read-only log has none)
                await trio.to_thread.run_sync(self._writer.join)
            if self._reader is not None:
                await trio.to_thread.run_sync(self._reader.close, limiter=self._read_limiter)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int64(value: int) -> int:
    """SQLite integers are 64-bit; a bound past that range means the same as its edge."""
    return min(max(value, _INT64[0]), _INT64[1])


def _select(
    flt: EventFilter, after_seq: int, until_seq: int | None, limit: int | None
) -> tuple[str, list[object]]:
    where: list[str] = ["seq > ?"]
    params: list[object] = [_int64(after_seq)]
    if until_seq is not None:
        where.append("seq <= ?")
        params.append(_int64(until_seq))
    if flt.session_id is not None:
        where.append("session_id = ?")
        params.append(flt.session_id)
    if flt.tree is not None:
        where.append("root = ?")
        params.append(flt.tree)
    if flt.since_ts is not None:
        where.append("ts >= ?")
        params.append(_int64(flt.since_ts))
    if flt.kinds is not None:
        where.append(f"kind IN ({','.join('?' * len(flt.kinds))})")
        params.extend(sorted(flt.kinds))
    sql = f"SELECT body FROM events WHERE {' AND '.join(where)} ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {_int64(int(limit))}"
    return sql, list(params)
