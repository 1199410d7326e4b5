"""Faults injected at the SQLite log's writer: its real connection, wrapped, and its
journal's writes (``journal_faults``).

The ``writer_connection`` fixture (import it into a test module) hands every writer
thread a :class:`FlakyConnection`; a test arms the faults it needs. A *commit* is a
``COMMIT`` or a lone ``INSERT`` outside ``BEGIN`` (a transaction of its own: the log
commits a small batch that way); a commit armed to fail raises before anything of it is
stored, as a failed ``COMMIT`` rolls back.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

from halo_actors.core.log import journal
from halo_actors.core.log import sqlite as sqlite_log

WRITER = "halo-log-writer"
RELEASE_SECONDS = 20.0
"""The longest an armed commit waits for :attr:`FlakyConnection.release`."""


class FlakyConnection:
    """The real connection, except for the faults a test arms."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.insert_fails: list[BaseException] = []
        self.commit_fails: list[BaseException] = []
        self.rollback_fails: list[BaseException] = []
        self.at_commit = threading.Event()
        """Set when the writer reaches a commit armed to fail."""
        self.release = threading.Event()
        """An armed commit waits for this (at most ``RELEASE_SECONDS``) before it raises
        (set by default)."""
        self.release.set()
        self.committed_on: list[str] = []
        """The thread of every commit (the writer's, or the trio thread's for an inline one)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        insert = sql.startswith("INSERT INTO batches")
        if insert and self.insert_fails:
            raise self.insert_fails.pop(0)
        commit = sql == "COMMIT" or (insert and not self.real.in_transaction)
        if commit:
            self.committed_on.append(threading.current_thread().name)
        if commit and self.commit_fails:
            self.at_commit.set()
            # bounded: a commit the test did not expect here (a close's, say) must fail
            # the test, not hang it in a thread join that ``fail_after`` cannot cancel
            self.release.wait(RELEASE_SECONDS)
            raise self.commit_fails.pop(0)
        if sql == "ROLLBACK" and self.rollback_fails:
            self.real.execute(sql)
            raise self.rollback_fails.pop(0)
        return self.real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def writer_connection(monkeypatch: pytest.MonkeyPatch) -> list[FlakyConnection]:
    """The writer thread's connections (one per log opened), each a :class:`FlakyConnection`."""
    made: list[FlakyConnection] = []
    real_connect = sqlite_log._connect

    def connect(path: Path, synchronous: sqlite_log.Synchronous) -> Any:
        conn = real_connect(path, synchronous)
        if threading.current_thread().name != WRITER:
            return conn
        flaky = FlakyConnection(conn)
        made.append(flaky)
        return flaky

    monkeypatch.setattr(sqlite_log, "_connect", connect)
    return made


class JournalFaults:
    """Faults armed for the journal writes of every log opened while the ``journal_faults``
    fixture is active: each armed error tears the next frame (half of it is written, for
    real, as a full disk leaves it) and raises."""

    def __init__(self) -> None:
        self.fails: list[BaseException] = []
        self.torn = 0
        """How many frames were torn."""


@pytest.fixture
def journal_faults(monkeypatch: pytest.MonkeyPatch) -> JournalFaults:
    faults = JournalFaults()

    class FlakyJournal(journal.Journal):
        def write(self, first_seq: int, last_seq: int, rows: list[bytes]) -> None:
            if not faults.fails:
                super().write(first_seq, last_seq, rows)
                return
            payload = journal.ROW_SEPARATOR.join(rows)
            header = journal.HEADER.pack(len(payload), zlib.crc32(payload), first_seq, last_seq)
            frame = header + payload
            os.write(self._fd, frame[: len(frame) // 2])
            faults.torn += 1
            raise faults.fails.pop(0)

    monkeypatch.setattr(sqlite_log, "Journal", FlakyJournal)
    return faults
