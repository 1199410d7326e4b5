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
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

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
)
from ..ids import root_of

_record_decoder = msgspec.json.Decoder(Record)

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
        match record.event:
            case SessionCreated():
                if self.created:  # a deleted id created again: a new life
                    self.life, self.queued = LIVE, 0
                    self.turn_open = self.compacting = False
                self.created = True
            case MessageQueued():
                self.queued += 1
                self.life = LIVE if self.life == STOPPED else self.life
            case RoundStarted(drained=drained):
                self.queued = max(0, self.queued - drained)
                self.life = LIVE if self.life == STOPPED else self.life
            case MailboxFolded(count=count) | MailboxDiscarded(count=count):
                self.queued = max(0, self.queued - count)
            case AgentStarted():
                self.turn_open = True
            case TurnCompleted():
                self.turn_open = False
            case FlagsChanged(is_compacting=compacting) if compacting is not None:
                self.compacting = compacting
            case SessionStopped():
                self.life = STOPPED
            case SessionArchived():
                self.life, self.queued = ARCHIVED, 0
            case SessionDeleted():
                self.life = DELETED
            case _:
                pass

    @property
    def needs_recovery(self) -> bool:
        """A restart recovers it at once: a turn or compaction was open, or messages wait."""
        if not self.created or self.life == DELETED:
            return False
        return self.turn_open or self.compacting or (self.queued > 0 and self.life != ARCHIVED)


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
"""
_COLUMNS = "session_id, created, life, queued, turn_open, compacting, last_seq, ts, first_seq"
_SELECT_ONE = f"SELECT {_COLUMNS} FROM sessions WHERE session_id = ?"
_UPSERT = (
    "INSERT OR REPLACE INTO sessions (session_id, root, created, life, queued, turn_open, "
    "compacting, last_seq, ts, first_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
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


def update_table(conn: sqlite3.Connection, records: Iterable[Record]) -> None:
    """Inside the writer's transaction: fold ``records`` into their sessions' rows."""
    touched: dict[str, SessionSummary] = {}
    for record in records:
        summary = touched.get(record.session_id)
        if summary is None:
            row = conn.execute(_SELECT_ONE, (record.session_id,)).fetchone()
            summary = _from_row(row) if row else SessionSummary(record.session_id)
            touched[record.session_id] = summary
        summary.apply(record)
    conn.executemany(_UPSERT, map(_to_row, touched.values()))


def read_table(conn: sqlite3.Connection, root: str | None) -> list[SessionSummary]:
    if root is None:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM sessions")
    else:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE root = ?", (root,))
    return [_from_row(row) for row in rows]


def backfill_table(conn: sqlite3.Connection) -> int:
    """Index a file written before the table existed (once, on open); returns the sessions
    indexed. A no-op when the table already has rows or there are no records."""
    if conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchone() is not None:
        return 0
    if conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is None:
        return 0
    rows = conn.execute("SELECT body FROM events ORDER BY seq")
    summaries = fold_index(_record_decoder.decode(body) for (body,) in rows)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(_UPSERT, map(_to_row, summaries.values()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(summaries)
