"""The session index: what a restart learns about every session without replaying it.

The summary fold must agree with the state fold on every field it keeps, and the SQLite
table (kept by the writer, in the commit of the records) with the fold of the stored
records, also for a file written before the table existed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_actors.core.conversation import TextBlock
from halo_actors.core.events import (
    AgentDone,
    AgentStarted,
    AssistantReplied,
    Event,
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
from halo_actors.core.log import EventLog, MemoryEventLog, SessionSummary, SqliteEventLog
from halo_actors.core.log.index import LIVE, MARK_ROWS, MARK_SESSIONS, fold_index
from halo_actors.core.state import SessionState, replay

SID = "cli_1700000000000_0badcafe"
CODES = {"live": 0, "stopped": 1, "archived": 2, "deleted": 3}

EVENTS: list[Event] = [
    SessionCreated(agent_id="default"),
    MessageQueued(text="m"),
    MessageQueued(text="n", source_session_id=f"{SID}>kid_1"),
    RoundStarted(text="m", drained=1),
    RoundStarted(text="m n", drained=2, kind="drained"),
    AgentStarted(),
    AssistantReplied(content=(TextBlock(text="a"),)),
    TurnCompleted(),
    AgentDone(),
    FlagsChanged(is_compacting=True),
    FlagsChanged(is_compacting=False),
    FlagsChanged(interrupt_requested=True),
    MailboxFolded(text="m", count=1),
    MailboxDiscarded(count=2),
    SessionStopped(),
    SessionArchived(),
    SessionDeleted(),
]


def projection(state: SessionState) -> tuple[object, ...]:
    """What the summary keeps, read from the full state."""
    return (
        bool(state.created_ts),
        CODES[state.lifecycle],
        len(state.mailbox),
        state.turn_open,
        state.is_compacting,
        state.last_seq,
        state.updated_ts,
    )


def of(summary: SessionSummary) -> tuple[object, ...]:
    return (
        summary.created,
        summary.life,
        summary.queued,
        summary.turn_open,
        summary.compacting,
        summary.last_seq,
        summary.ts,
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(EVENTS), max_size=40))
def test_the_summary_fold_agrees_with_the_state_fold(events: list[Event]) -> None:
    records = [
        Record(seq=i + 1, session_id=SID, ts=1000 + i, event=e) for i, e in enumerate(events)
    ]
    summary = SessionSummary(SID)
    for record in records:
        summary.apply(record)
    state = replay(SID, records)
    assert of(summary) == projection(state)
    recoverable = state.created_ts > 0 and state.lifecycle != "deleted"
    waiting = bool(state.mailbox) and state.lifecycle != "archived"  # archived: never run
    has_work = state.turn_open or state.is_compacting or waiting
    assert summary.needs_recovery == (recoverable and has_work)


STORY: list[tuple[str, Event]] = [
    (SID, SessionCreated(agent_id="default")),
    (SID, MessageQueued(text="hello")),
    (f"{SID}>kid_1", SessionCreated(agent_id="default", parent_id=SID)),
    (SID, RoundStarted(text="hello", drained=1)),
    (SID, AgentStarted()),
    (f"{SID}>kid_1", MessageQueued(text="queued, never run")),
    (SID, MessageQueued(text="behind the turn")),
    (SID, TurnCompleted()),
    (SID, MailboxFolded(text="behind the turn", count=1)),
    (SID, SessionStopped()),
    ("cli_1700000000001_deadbeef", SessionCreated(agent_id="default")),
    ("cli_1700000000001_deadbeef", SessionArchived()),
    ("cli_1700000000002_feedface", SessionCreated(agent_id="default")),
    ("cli_1700000000002_feedface", SessionDeleted()),
]


async def tell(log: EventLog) -> list[Record]:
    for sid, event in STORY:
        log.append_nowait(sid, event)
    await log.wait_durable(log.stamped_seq)
    return await log.read()


async def assert_index_is_the_fold(log: EventLog, records: list[Record]) -> None:
    expected = {sid: of(s) for sid, s in fold_index(records).items()}
    assert {s.session_id: of(s) for s in await log.session_index()} == expected
    tree = {s.session_id for s in await log.session_index(SID)}
    assert tree == {SID, f"{SID}>kid_1"}
    needing = {s.session_id for s in await log.session_index() if s.needs_recovery}
    assert needing == {f"{SID}>kid_1"}  # a queued message; the stop folded the other's


async def test_the_sqlite_index_is_the_fold_of_the_stored_records(tmp_path: Path) -> None:
    with trio.fail_after(10):
        log = await SqliteEventLog.open(tmp_path / "log.db")
        try:
            records = await tell(log)
            await assert_index_is_the_fold(log, records)
        finally:
            await log.aclose()
        reopened = await SqliteEventLog.open(tmp_path / "log.db")
        try:
            await assert_index_is_the_fold(reopened, records)
            assert (await reopened.session_index(SID))[0].life in (LIVE, 1)
        finally:
            await reopened.aclose()


async def test_the_memory_log_answers_the_index_by_folding(tmp_path: Path) -> None:
    log = MemoryEventLog()
    await assert_index_is_the_fold(log, await tell(log))


async def test_a_log_file_from_before_the_index_is_indexed_when_opened(tmp_path: Path) -> None:
    with trio.fail_after(10):
        log = await SqliteEventLog.open(tmp_path / "log.db")
        try:
            records = await tell(log)
        finally:
            await log.aclose()
        with sqlite3.connect(tmp_path / "log.db") as conn:  # as an older release left it
            conn.execute("DROP TABLE sessions")
            conn.execute("DROP TABLE sessions_mark")
        read_only = await SqliteEventLog.open(tmp_path / "log.db", read_only=True)
        try:  # cannot write the table: answers by folding
            await assert_index_is_the_fold(read_only, records)
        finally:
            await read_only.aclose()
        reopened = await SqliteEventLog.open(tmp_path / "log.db")
        try:
            await assert_index_is_the_fold(reopened, records)
        finally:
            await reopened.aclose()


async def test_a_long_tail_found_on_open_is_written_to_the_table_with_its_mark(
    tmp_path: Path,
) -> None:
    """A tail of ``MARK_ROWS`` records or more past the mark (a file from before the table,
    here) is folded and written on open, rows and mark in one transaction, before the log
    takes an append: the next open starts from the mark."""
    db = tmp_path / "log.db"
    with trio.fail_after(10):
        log = await SqliteEventLog.open(db)
        try:
            for _ in range(MARK_ROWS // 50 + 1):
                log.append_nowait(SID, *(AgentDone() for _i in range(50)))
            await log.wait_durable(log.stamped_seq)
        finally:
            await log.aclose()
        with sqlite3.connect(db) as conn:  # the table forgotten: every record is the tail
            conn.execute("DELETE FROM sessions")
            conn.execute("UPDATE sessions_mark SET through = 0")
        reopened = await SqliteEventLog.open(db)
        try:
            rows, mark = table_and_mark(db)  # written while open, not by a clean close
            assert mark == reopened.last_seq >= MARK_ROWS
            assert rows == {SID: mark}
            index = {s.session_id: s for s in await reopened.session_index()}
            assert index == fold_index(await reopened.read())
        finally:
            await reopened.aclose()


async def test_a_session_is_read_back_synchronously_as_stored(tmp_path: Path) -> None:
    with trio.fail_after(10):
        log = await SqliteEventLog.open(tmp_path / "log.db")
        try:
            records = await tell(log)
            mine = [r for r in records if r.session_id == SID]
            assert log.read_session_sync(SID) == mine
            assert log.read_session_sync("cli_1700000000009_00000000") == []
        finally:
            await log.aclose()
        memory = MemoryEventLog()
        stored = await tell(memory)
        assert memory.read_session_sync(SID) == [r for r in stored if r.session_id == SID]


def table_and_mark(db: Path) -> tuple[dict[str, int], int]:
    """The ``sessions`` table's last_seq per session, and its mark, read raw."""
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT session_id, last_seq FROM sessions"))
        (mark,) = conn.execute("SELECT through FROM sessions_mark").fetchone()
        return rows, mark


async def test_the_table_is_written_behind_its_records_and_a_reader_folds_the_tail(
    tmp_path: Path,
) -> None:
    """A commit writes the records only; the table follows every ``MARK_ROWS`` records
    or ``MARK_SESSIONS`` sessions, and on a clean close. Between, the index is the table
    plus the fold of the records past its mark."""
    db = tmp_path / "log.db"
    with trio.fail_after(10):
        log = await SqliteEventLog.open(db)
        try:
            records = await tell(log)
            await log.wait_indexed()  # SQLite holds them, not only the journal
            assert table_and_mark(db) == ({}, 0)  # a few records: the table has not moved
            await assert_index_is_the_fold(log, records)

            for _ in range(MARK_ROWS // 50):  # past MARK_ROWS: the table catches up
                log.append_nowait(SID, *(AgentDone() for _i in range(50)))
                await log.wait_durable(log.stamped_seq)
            await log.wait_indexed()
            rows, mark = table_and_mark(db)
            assert mark > records[-1].seq
            assert rows[SID] == mark  # the last record up to the mark was SID's
            log.append_nowait(f"{SID}>kid_1", AgentDone())
            await log.wait_durable(log.stamped_seq)
            await log.wait_indexed()
            assert table_and_mark(db)[1] == mark
            await assert_index_is_the_fold(log, await log.read())

            for i in range(MARK_SESSIONS):  # many sessions touched: the table catches up
                log.append_nowait(f"cli_1700000000000_{i:08x}", SessionCreated(agent_id="a"))
            await log.wait_durable(log.stamped_seq)
            await log.wait_indexed()
            rows, mark = table_and_mark(db)
            assert mark == log.last_seq and rows.keys() == fold_index(await log.read()).keys()
            log.append_nowait(SID, AgentDone())
        finally:
            await log.aclose()
        rows, mark = table_and_mark(db)  # a clean close wrote what the table lagged behind
        reopened = await SqliteEventLog.open(db)
        try:
            assert mark == reopened.last_seq and rows[SID] == mark
            everything = await reopened.read()
            assert {s.session_id: s for s in await reopened.session_index()} == fold_index(
                everything
            )
        finally:
            await reopened.aclose()
