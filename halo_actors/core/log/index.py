"""The session index: per session, what a restart must know without replaying it.

A :class:`SessionSummary` is a small fold over one session's records: whether it was
created, its lifecycle, how many messages wait in its mailbox, whether a turn or a
compaction is open, and its last seq and time. From it a restart knows which sessions
exist (and which were deleted), and which need recovering at once (an open turn, a
compaction or queued messages: :attr:`SessionSummary.needs_recovery`); every other
session is rebuilt from its records only when it is next addressed
(``docs/design/passivation.md``).

Invariants:
- :meth:`SessionSummary.apply` agrees with :meth:`~halo_actors.core.state.SessionState.apply`
  on every field it keeps (a test replays real runs through both);
- the SQLite backend keeps the ``sessions`` table in the same transaction as the
  records it summarises, so after a crash the table is exactly the fold of the
  stored records (a file written before the table existed is indexed once, on open);
- a backend with no table of its own answers by folding everything it stores
  (:func:`fold_index`): correct, but a full scan.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..events import (
    AgentStarted,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Record,
    RoundStarted,
    SessionArchived,
    SessionCreated,
    SessionDeleted,
    SessionStopped,
    TurnCompleted,
    decode_records,
)
from ..ids import root_of

LIVE, STOPPED, ARCHIVED, DELETED = 0, 1, 2, 3
"""Lifecycle codes (the order of ``core.state.Lifecycle``)."""


@dataclass(slots=True)
class SessionSummary:
    session_id: str
    created: bool = False
    life: int = LIVE
    queued: int = 0
    turn_open: bool = False
    compacting: bool = False
    last_seq: int = 0
    ts: int = 0
    first_seq: int = 0
    """The session's first record ever (sessions list in creation order by it)."""

    def apply(self, record: Record) -> None:
        self.last_seq, self.ts = record.seq, record.ts
        self.first_seq = self.first_seq or record.seq
        handler = _APPLY.get(type(record.event))  # absent: nothing else changes
        if handler is not None:
            handler(self, record.event)

    # --- one handler per event type that changes a field (``_APPLY``) ---

    def _created(self, e: SessionCreated) -> None:
        if self.created:  # a deleted id created again: a new life
            self.life, self.queued = LIVE, 0
            self.turn_open = self.compacting = False
        self.created = True

    def _queued(self, e: MessageQueued) -> None:
        self.queued += 1
        self.life = LIVE if self.life == STOPPED else self.life

    def _round(self, e: RoundStarted) -> None:
        self.queued = max(0, self.queued - e.drained)
        self.life = LIVE if self.life == STOPPED else self.life

    def _drained(self, e: MailboxFolded | MailboxDiscarded) -> None:
        self.queued = max(0, self.queued - e.count)

    def _turn_started(self, e: AgentStarted) -> None:
        self.turn_open = True

    def _turn_ended(self, e: TurnCompleted) -> None:
        self.turn_open = False

    def _flags(self, e: FlagsChanged) -> None:
        if e.is_compacting is not None:
            self.compacting = e.is_compacting

    def _stopped(self, e: SessionStopped) -> None:
        self.life = STOPPED

    def _archived(self, e: SessionArchived) -> None:
        self.life, self.queued = ARCHIVED, 0

    def _deleted(self, e: SessionDeleted) -> None:
        self.life = DELETED

    @property
    def needs_recovery(self) -> bool:
        """A restart recovers it at once: a turn or compaction was open, or messages wait."""
        if not self.created or self.life == DELETED:
            return False
        return self.turn_open or self.compacting or (self.queued > 0 and self.life != ARCHIVED)


_APPLY: dict[type, Callable[[SessionSummary, Any], None]] = {
    SessionCreated: SessionSummary._created,
    MessageQueued: SessionSummary._queued,
    RoundStarted: SessionSummary._round,
    MailboxFolded: SessionSummary._drained,
    MailboxDiscarded: SessionSummary._drained,
    AgentStarted: SessionSummary._turn_started,
    TurnCompleted: SessionSummary._turn_ended,
    FlagsChanged: SessionSummary._flags,
    SessionStopped: SessionSummary._stopped,
    SessionArchived: SessionSummary._archived,
    SessionDeleted: SessionSummary._deleted,
}


def fold_index(records: Iterable[Record]) -> dict[str, SessionSummary]:
    """Summaries of every session in ``records`` (in seq order)."""
    out: dict[str, SessionSummary] = {}
    for record in records:
        summary = out.get(record.session_id)
        if summary is None:
            summary = out[record.session_id] = SessionSummary(record.session_id)
        summary.apply(record)
    return out


# --- the SQLite table ------------------------------------------------------------------
#
# The ``sessions`` table is written behind the records, not with every commit: it holds
# the fold of every record up to its mark (``sessions_mark``), and whoever reads it folds
# the few records past the mark (at most about ``MARK_ROWS`` of them) on top. The writer
# keeps the summaries of the sessions touched since the mark in memory (``TableWriter``)
# and writes them, with the new mark, in the same transaction as the records that reach
# ``MARK_ROWS`` or ``MARK_SESSIONS``. So a commit of a turn writes the records' B-trees
# only, and after a crash the table plus the tail past its mark is still exactly the fold
# of what is stored (``docs/design/event-log.md``).

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT    PRIMARY KEY,
    root       TEXT    NOT NULL,
    created    INTEGER NOT NULL,
    life       INTEGER NOT NULL,
    queued     INTEGER NOT NULL,
    turn_open  INTEGER NOT NULL,
    compacting INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    ts         INTEGER NOT NULL,
    first_seq  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_root ON sessions (root);
CREATE TABLE IF NOT EXISTS sessions_mark (
    id      INTEGER PRIMARY KEY CHECK (id = 0),
    through INTEGER NOT NULL
);
"""
MARK_ROWS = 1_000
"""The writer writes the table (and moves its mark) once this many records are past it."""
MARK_SESSIONS = 256
"""... or once this many sessions were touched since it was last written."""
CACHE_SESSIONS = 10_000
"""The writer keeps up to about this many clean summaries (a miss reads the table)."""

_COLUMNS = "session_id, created, life, queued, turn_open, compacting, last_seq, ts, first_seq"
_SELECT_ONE = f"SELECT {_COLUMNS} FROM sessions WHERE session_id = ?"
_UPSERT = (
    "INSERT INTO sessions (session_id, root, created, life, queued, turn_open, "
    "compacting, last_seq, ts, first_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET created = excluded.created, "
    "life = excluded.life, queued = excluded.queued, turn_open = excluded.turn_open, "
    "compacting = excluded.compacting, last_seq = excluded.last_seq, ts = excluded.ts"
)
"""An update in place leaves ``root`` and ``first_seq`` (never changing) and so the
``sessions_by_root`` index untouched."""
_SET_MARK = "INSERT OR REPLACE INTO sessions_mark (id, through) VALUES (0, ?)"
_Row = tuple[str, int, int, int, int, int, int, int, int]


def _from_row(row: _Row) -> SessionSummary:
    sid, created, life, queued, turn_open, compacting, last_seq, ts, first = row
    return SessionSummary(
        sid, bool(created), life, queued, bool(turn_open), bool(compacting), last_seq, ts, first
    )


def _to_row(s: SessionSummary) -> tuple[object, ...]:
    return (
        s.session_id,
        root_of(s.session_id),
        int(s.created),
        s.life,
        s.queued,
        int(s.turn_open),
        int(s.compacting),
        s.last_seq,
        s.ts,
        s.first_seq,
    )


def _mark(conn: sqlite3.Connection) -> int | None:
    """The table's mark, or None for a file whose table has none (written before marks:
    its table was kept in every commit, so it is exact)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions_mark'").fetchone() is None:
        return None
    row = conn.execute("SELECT through FROM sessions_mark WHERE id = 0").fetchone()
    return None if row is None else int(row[0])


def _records_after(conn: sqlite3.Connection, seq: int, root: str | None) -> Iterator[Record]:
    """The stored records past ``seq`` (of one tree, if ``root``), by seq, from the
    ``batches`` rows that hold them (a row's key is its last record's seq)."""
    if root is None:
        rows = conn.execute("SELECT body FROM batches WHERE seq > ? ORDER BY seq", (seq,))
    else:
        sql = "SELECT body FROM batches WHERE seq > ? AND root = ? ORDER BY seq"
        rows = conn.execute(sql, (seq, root))
    return (record for (body,) in rows for record in decode_records(body) if record.seq > seq)


class TableWriter:
    """The writer's side of the table: folds each commit's records into the summaries of
    the sessions they touch, and writes those to the table (moving the mark) every
    ``MARK_ROWS`` records or ``MARK_SESSIONS`` sessions: :meth:`fold` says when, and the
    log then calls :meth:`write` inside the commit of those records. Used by whichever
    side holds the writer's connection. After a failed commit it holds summaries the
    file never got; the log is stopped then (fail-stop), so none is written,
    not even by :meth:`write_behind` (the log skips it after a failure)."""

    def __init__(self, mark: int) -> None:
        self.mark = mark
        self._dirty: dict[str, SessionSummary] = {}
        """Every session touched by a record past the mark (the table lags behind them)."""
        self._clean: dict[str, SessionSummary] = {}
        """Summaries equal to their table rows, kept to spare a read (bounded)."""
        self._last_seq = mark
        """The last seq folded: what the table reaches once written (seqs are dense, so
        ``_last_seq - mark`` records are past the mark)."""

    def load_tail(self, conn: sqlite3.Connection) -> None:
        """On open: fold the records stored past the mark (a crash left them there), and
        write the table if that tail is long (rows and mark in one transaction)."""
        if self.fold(conn, list(_records_after(conn, self.mark, None))):
            with _transaction(conn):
                self.write(conn)

    def fold(self, conn: sqlite3.Connection, records: Iterable[Record]) -> bool:
        """Fold ``records`` (in seq order, about to be committed) into the summaries, reading
        the table for a session not cached; writes nothing. True when the table is due:
        :meth:`write` it in the transaction that stores these records."""
        dirty = self._dirty
        summary: SessionSummary | None = None
        for record in records:
            sid = record.session_id
            if summary is None or summary.session_id != sid:  # a run of one session's
                summary = dirty.get(sid)
                if summary is None:
                    summary = dirty[sid] = self._load(conn, sid)
            summary.apply(record)
        if summary is not None:
            self._last_seq = record.seq
        return self._last_seq - self.mark >= MARK_ROWS or len(dirty) >= MARK_SESSIONS

    def write_behind(self, conn: sqlite3.Connection) -> None:
        """On a clean close: write what the table lags behind in a transaction of its own,
        so the next open has no tail to fold."""
        if self._dirty:
            with _transaction(conn):
                self.write(conn)

    def write(self, conn: sqlite3.Connection) -> None:
        """Write every summary touched since the mark and move the mark to the last seq
        folded (inside the transaction that stores it)."""
        if self._dirty:
            conn.executemany(_UPSERT, map(_to_row, self._dirty.values()))
        conn.execute(_SET_MARK, (self._last_seq,))
        self.mark = self._last_seq
        if len(self._clean) + len(self._dirty) > CACHE_SESSIONS:
            self._clean.clear()
        self._clean.update(self._dirty)
        self._dirty = {}

    def _load(self, conn: sqlite3.Connection, session_id: str) -> SessionSummary:
        summary = self._clean.pop(session_id, None)
        if summary is None:
            row = conn.execute(_SELECT_ONE, (session_id,)).fetchone()
            summary = _from_row(row) if row else SessionSummary(session_id)
        return summary


def open_table(conn: sqlite3.Connection) -> TableWriter:
    """On open, for writing: give a file from before the table (or before its mark) both,
    in one transaction, then the writer of its table with the tail past the mark folded."""
    mark = _mark(conn)
    if mark is None:
        with _transaction(conn):
            _backfill(conn)
            mark = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM batches").fetchone()[0])
            conn.execute(_SET_MARK, (mark,))
    writer = TableWriter(mark)
    writer.load_tail(conn)
    return writer


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction of its own (the connection is in autocommit mode)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _backfill(conn: sqlite3.Connection) -> None:
    """Index a file written before the table existed. A no-op when the table has rows
    (then it was kept with every commit: exact) or there are no records."""
    if conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchone() is not None:
        return
    summaries = fold_index(_records_after(conn, 0, None))
    conn.executemany(_UPSERT, map(_to_row, summaries.values()))


def read_table(conn: sqlite3.Connection, root: str | None) -> list[SessionSummary]:
    """The table's rows with the records past its mark folded on top, in one read
    transaction (one snapshot of both)."""
    conn.execute("BEGIN")
    try:
        mark = _mark(conn)
        if root is None:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM sessions")
        else:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE root = ?", (root,))
        out = {row[0]: _from_row(row) for row in rows}
        if mark is not None:
            for record in _records_after(conn, mark, root):
                summary = out.get(record.session_id)
                if summary is None:
                    summary = out[record.session_id] = SessionSummary(record.session_id)
                summary.apply(record)
    finally:
        conn.execute("COMMIT")
    return list(out.values())
