"""The SQLite log when its writer hits trouble (fail-stop), and its read-only mode.

A commit that raises anything stops the writer: that batch, everything queued
behind it and every later append fail with ``StoreFailed``; nothing past the last
good commit is ever published, read back or recovered, and no appender or waiter is
left waiting (``append`` waits under a shield, so a hang there could never be
cancelled). A commit is a journal write (the default), or an SQLite commit where there
is no journal (``synchronous`` FULL: ``UNJOURNALED``); a failed *index* commit (SQLite
taking what the journal holds) stops the log too but loses nothing published. The
faults are injected by handing the writer a connection that raises (the real one,
wrapped) or by tearing a journal frame (``sqlite_faults``).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio
from sqlite_faults import WRITER, FlakyConnection, JournalFaults, journal_faults, writer_connection

from halo_actors.core.errors import StoreClosed, StoreFailed, SubscriptionClosed
from halo_actors.core.events import Record, TextStreamed
from halo_actors.core.log import EventFilter, SqliteEventLog
from halo_actors.core.log import sqlite as sqlite_log
from halo_actors.core.log.index import fold_index

__all__ = ["journal_faults", "writer_connection"]  # fixtures, used by name

BUDGET = 10.0
UNJOURNALED: sqlite_log.Synchronous = "FULL"
"""A log with no journal: an SQLite commit is what makes its appends durable."""


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


def labels(records: list[Record]) -> list[str]:
    return [r.event.text for r in records if isinstance(r.event, TextStreamed)]


async def assert_a_reopen_recovers(path: Path, durable: list[Record]) -> None:
    """The file reopens as of the last good commit; the next append gets the next seq (a
    lost seq nobody saw is handed out again)."""
    again = await SqliteEventLog.open(path)
    try:
        assert await again.read() == durable
        index = {s.session_id: s for s in await again.session_index()}
        assert index == fold_index(durable)  # the lost records are in no session's summary
        (next_one,) = await again.append("a", text("after"))
        assert next_one.seq == durable[-1].seq + 1
    finally:
        await again.aclose()


async def wait_for_writer(made: list[FlakyConnection]) -> FlakyConnection:
    while not made:  # noqa: ASYNC110 - the writer thread connects on its own schedule
        await trio.sleep(0.001)
    return made[0]


@pytest.mark.parametrize("commit", ["journal write", "sqlite commit"])
async def test_a_commit_failing_with_any_error_stops_the_log_fail_stop(
    tmp_path: Path,
    writer_connection: list[FlakyConnection],
    journal_faults: JournalFaults,
    commit: str,
) -> None:
    """Fail-stop: "after a failed commit every later append fails"."""
    journaled = commit == "journal write"
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(
            tmp_path / "events.db", synchronous="NORMAL" if journaled else UNJOURNALED
        )
        try:
            (kept,) = await log.append("a", text("kept"))
            conn = await wait_for_writer(writer_connection)
            if journaled:
                journal_faults.fails.append(RuntimeError("not an sqlite3 error"))
            else:
                conn.insert_fails.append(RuntimeError("not an sqlite3 error"))
            with pytest.raises(StoreFailed, match="not an sqlite3 error"):
                await log.append("a", text("lost"))
            with pytest.raises(StoreFailed):
                await log.append("a", text("later"))
            with pytest.raises(StoreFailed):
                log.append_nowait("b", text("later"))
            assert "durable up to seq 1" in str(await log.wait_failed())
            assert log.failure is not None
            assert labels(await log.read()) == ["kept"]
            assert log.last_seq == kept.seq == 1
        finally:
            await log.aclose()


@pytest.mark.parametrize("commit", ["journal write", "sqlite commit"])
async def test_records_queued_behind_a_failed_commit_are_never_seen_and_a_reopen_recovers(
    tmp_path: Path,
    writer_connection: list[FlakyConnection],
    journal_faults: JournalFaults,
    commit: str,
) -> None:
    """An I/O error at the commit (a full disk tearing the journal's frame, or SQLite's
    COMMIT where there is no journal): no reader (read, subscription, ``last_seq``) ever
    sees the lost suffix; waiters fail instead of hanging; the reopened file holds the
    durable prefix (a torn frame is dropped), and numbering goes on after it."""
    journaled = commit == "journal write"
    path = tmp_path / "events.db"
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(path, synchronous="NORMAL" if journaled else UNJOURNALED)
        seen: list[Record] = []
        try:
            durable = await log.append("a", text("d1"), text("d2"))
            conn = await wait_for_writer(writer_connection)
            async with log.subscribe(EventFilter(tree="a")) as sub:
                if journaled:
                    journal_faults.fails.append(OSError(28, "No space left on device"))
                else:
                    conn.commit_fails.append(sqlite3.OperationalError("disk I/O error"))
                lost = [log.append_nowait("a", text(f"p{i}")) for i in range(20)]
                with pytest.raises(StoreFailed, match=r"No space left|disk I/O error"):
                    await log.wait_durable(lost[-1][0].seq)
                with pytest.raises(SubscriptionClosed):
                    async for record in sub:
                        seen.append(record)
            assert seen == durable  # the catch-up, then the end: nothing of the suffix
            assert log.last_seq == durable[-1].seq
            assert await log.read() == durable
            with pytest.raises(StoreFailed):
                await log.wait_durable(lost[0][0].seq)
        finally:
            await log.aclose()
        assert journal_faults.torn == journaled
        await assert_a_reopen_recovers(path, durable)


@pytest.mark.parametrize("thread", ["trio thread", "writer thread"])
async def test_an_index_commit_that_fails_stops_the_log_and_loses_nothing_published(
    tmp_path: Path,
    writer_connection: list[FlakyConnection],
    monkeypatch: pytest.MonkeyPatch,
    thread: str,
) -> None:
    """Fail-stop, for SQLite failing to index what the journal holds (inline on the trio
    thread, or a burst on the writer thread): every later append fails with
    ``StoreFailed``, the writer thread stops; but what was published stays published (it
    is durable, in the journal): reads still serve it, and a reopen indexes it."""
    if thread == "writer thread":
        monkeypatch.setattr(sqlite_log, "INLINE_INDEX_MAX", 0)
    path = tmp_path / "events.db"
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(path)
        try:
            published = await log.append("a", text("d1"))
            conn = await wait_for_writer(writer_connection)
            published += await log.append("a", text("d2"), text("d3"))
            published += await log.append("a>b", text("d4"))
            conn.commit_fails.append(sqlite3.OperationalError("disk I/O error"))
            assert not await log.wait_indexed()  # it never will be, in this process
            assert conn.committed_on[-1] == (WRITER if thread == "writer thread" else "MainThread")
            with pytest.raises(StoreFailed, match="disk I/O error"):
                log.append_nowait("a", text("later"))
            assert log.last_seq == published[-1].seq
            assert await log.read() == published
            assert log.read_session_sync("a") == published[:3]
            index = {s.session_id: s for s in await log.session_index()}
            assert index == fold_index(published)  # folded from the reads
            await trio.to_thread.run_sync(log._writer.join)  # the writer thread stopped
        finally:
            await log.aclose()
        await assert_a_reopen_recovers(path, published)


async def test_appends_staged_while_a_commit_fails_are_never_committed_or_seen(
    tmp_path: Path, writer_connection: list[FlakyConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail-stop with staged appends: records stamped while the writer's commit fails
    (staged on the trio thread, not handed to the writer yet) are dropped with the failed
    batch: never committed, never published; their waiters fail; a reopen holds the
    durable prefix only. (No journal here: every commit goes through the writer thread,
    and the armed COMMIT blocks its thread until released.)"""
    path = tmp_path / "events.db"
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(path, synchronous=UNJOURNALED)
        try:
            durable = await log.append("a", text("d1"))
            conn = await wait_for_writer(writer_connection)
            conn.release.clear()
            conn.commit_fails.append(sqlite3.OperationalError("disk I/O error"))
            (failing,) = log.append_nowait("a", text("in the failing commit"))
            while not conn.at_commit.is_set():  # noqa: ASYNC110 - the writer's own thread
                await trio.sleep(0.001)
            staged = log.append_nowait("b", text("s1"), text("s2"))  # no checkpoint since
            conn.release.set()
            for seq in (failing.seq, staged[-1].seq):
                with pytest.raises(StoreFailed, match="disk I/O error"):
                    await log.wait_durable(seq)
            with pytest.raises(StoreFailed):
                log.append_nowait("b", text("later"))
            assert log.last_seq == durable[-1].seq
            assert await log.read() == durable
        finally:
            await log.aclose()
        again = await SqliteEventLog.open(path, read_only=True)
        try:
            assert await again.read() == durable
        finally:
            await again.aclose()


async def test_a_writer_that_cannot_connect_fails_appends_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = sqlite_log._connect

    def connect(path: Path, synchronous: sqlite_log.Synchronous) -> sqlite3.Connection:
        if threading.current_thread().name == WRITER:
            raise OSError("no writer today")
        return real_connect(path, synchronous)

    monkeypatch.setattr(sqlite_log, "_connect", connect)
    failures: list[str] = []

    async def appender(i: int) -> None:
        with pytest.raises(StoreFailed, match="no writer today") as caught:
            await log.append("a", text(f"t{i}"))
        failures.append(str(caught.value))

    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(tmp_path / "events.db")
        try:
            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(appender, i)
            assert len(failures) == 5
            with pytest.raises(StoreFailed):  # and every later append fails at once
                await log.append("a", text("later"))
            assert await log.read() == []
        finally:
            await log.aclose()


async def test_a_writer_whose_rollback_fails_too_fails_queued_and_later_appends(
    tmp_path: Path, writer_connection: list[FlakyConnection]
) -> None:
    outcomes: list[str] = []

    async def appender(i: int) -> None:
        try:
            await log.append("a", text(f"t{i}"))
            outcomes.append("stored")
        except StoreFailed:
            outcomes.append("failed")

    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(tmp_path / "events.db", synchronous=UNJOURNALED)
        try:
            (first,) = await log.append("a", text("before"))
            conn = await wait_for_writer(writer_connection)
            conn.insert_fails.append(MemoryError())
            conn.rollback_fails.append(RuntimeError("rollback broke"))  # the writer stops
            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(appender, i)
            assert outcomes.count("failed") >= 1
            assert set(outcomes) <= {"stored", "failed"}
            with pytest.raises(StoreFailed, match="writer stopped"):
                await log.append("a", text("after"))
            stored = await log.read()
            assert stored[0] == first
            assert len(stored) == 1 + outcomes.count("stored")
        finally:
            await log.aclose()


async def test_a_read_only_log_reads_a_live_file_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "ws" / ".halo" / "events.db"
    with trio.fail_after(BUDGET):
        writer = await SqliteEventLog.open(path)
        try:
            written = await writer.append("a", text("one"), text("two"))
            before = {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()}
            reader = await SqliteEventLog.open(path, read_only=True)
            try:
                assert reader.last_seq == 2
                assert await reader.read(EventFilter(session_id="a")) == written
                with pytest.raises(StoreClosed, match="read-only"):
                    await reader.append("a", text("no"))
                more = await writer.append("a", text("three"))
                assert await reader.read(after_seq=2) == more  # sees later commits
                async with reader.subscribe(after_seq=1) as sub:
                    got = []
                    async for record in sub:
                        got.append(record)
                        if len(got) == 1:
                            break
                assert got == written[1:]
            finally:
                await reader.aclose()
            assert path.with_name("events.db").stat().st_mtime_ns == before["events.db"]
        finally:
            await writer.aclose()


async def test_a_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nothing" / ".halo" / "events.db"
    with trio.fail_after(BUDGET), pytest.raises(FileNotFoundError):
        await SqliteEventLog.open(path, read_only=True)
    assert not (tmp_path / "nothing").exists()
