"""Fail-stop: a commit that fails stops the runtime cleanly, and a reopen recovers.

The runtime appends pipelined (its sessions' states run ahead of the durable log), so
a failed commit loses records a session had already applied. The rules checked here:
no reader of the log ever sees the lost suffix, ``open_supervisor`` ends every task
and raises ``StoreFailed``, a message whose ``send`` failed was never acknowledged,
and reopening the file recovers the durable prefix (a restart, as after a crash).

The fault is a full disk tearing the journal write that would have made the message
durable (``sqlite_faults``). A failed *index* commit (SQLite taking what the journal
holds) stops the runtime too, but loses nothing: the restart recovers every record.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from sqlite_faults import FlakyConnection, JournalFaults, journal_faults, writer_connection

from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.core.errors import StoreFailed, SubscriptionClosed
from halo_actors.core.events import MessageQueued, Record
from halo_actors.core.log import SqliteEventLog
from halo_actors.runtime.supervisor import open_supervisor
from halo_actors.tools.files import Workspace

__all__ = ["journal_faults", "writer_connection"]  # fixtures, used by name

BUDGET = 20.0


def model() -> ScriptedModel:
    slow = Step(text="a long answer", delay=0.05)
    return ScriptedModel(
        {
            "default": Script(
                rules=(Rule(match="second", steps=(slow,)), Rule(steps=(Step(text="ok"),)))
            )
        }
    )


async def test_a_failed_commit_stops_the_runtime_no_reader_sees_the_lost_suffix_and_a_restart_recovers(
    tmp_path: Path, journal_faults: JournalFaults
) -> None:
    """Spec (issue): "after a failed commit every later append fails and the runtime stops
    cleanly"; "no reader ever sees a record that is not durable"."""
    path = tmp_path / ".halo" / "events.db"
    seen: list[Record] = []
    with trio.fail_after(BUDGET):
        event_log = await SqliteEventLog.open(path)
        try:
            async with trio.open_nursery() as readers:

                async def follow(task_status: trio.TaskStatus[None]) -> None:
                    async with event_log.subscribe() as subscription:
                        task_status.started()
                        try:
                            async for record in subscription:
                                assert record.seq <= event_log.last_seq
                                seen.append(record)
                        except SubscriptionClosed:
                            return  # the log failed: every subscription ends

                await readers.start(follow)
                with pytest.raises(StoreFailed, match="No space left"):
                    async with open_supervisor(
                        event_log, model(), workspace=Workspace(tmp_path)
                    ) as sup:
                        sid = await sup.create_session("web_a_1")
                        assert await sup.send(sid, "first") == "started"
                        await sup.wait_idle(sid)
                        journal_faults.fails.append(OSError(28, "No space left on device"))
                        await sup.send(sid, "second")  # never acknowledged
                        pytest.fail("send acknowledged a message the log lost")
                # The session had applied records the file never got: the lost suffix.
                assert event_log.stamped_seq > event_log.last_seq
                durable = event_log.last_seq
        finally:
            await event_log.aclose()
        assert [r.seq for r in seen] == list(range(1, durable + 1))

        reopened = await SqliteEventLog.open(path)
        try:
            stored = await reopened.read()
            assert stored == seen  # nothing seen is gone, nothing unseen appeared
            texts = [r.event.text for r in stored if isinstance(r.event, MessageQueued)]
            assert texts == ["first"]
            async with open_supervisor(reopened, model(), workspace=Workspace(tmp_path)) as sup:
                assert sup.output(sid) == "ok"
                assert not sup.is_running(sid)
                assert await sup.send(sid, "third") == "started"
                await sup.wait_idle(sid)
                assert sup.output(sid) == "ok"
        finally:
            await reopened.aclose()


async def test_a_failed_index_commit_stops_the_runtime_and_the_restart_loses_nothing(
    tmp_path: Path, writer_connection: list[FlakyConnection]
) -> None:
    """A commit of SQLite indexing the journal fails: the runtime stops cleanly (fail-stop:
    later appends could not be indexed), and every record published before is still
    there after the restart, read from the journal it was durable in."""
    path = tmp_path / ".halo" / "events.db"
    with trio.fail_after(BUDGET):
        event_log = await SqliteEventLog.open(path)
        try:
            with pytest.raises(StoreFailed, match="disk I/O error"):
                async with open_supervisor(
                    event_log, model(), workspace=Workspace(tmp_path)
                ) as sup:
                    sid = await sup.create_session("web_a_1")
                    for text in ("first", "third"):
                        assert await sup.send(sid, text) == "started"
                        await sup.wait_idle(sid)
                    published = await event_log.read()
                    writer_connection[0].commit_fails.append(
                        sqlite3.OperationalError("disk I/O error")
                    )
                    assert not await event_log.wait_indexed()
                    await trio.sleep_forever()  # the runtime stops itself
            assert event_log.last_seq == published[-1].seq
        finally:
            await event_log.aclose()
        reopened = await SqliteEventLog.open(path)
        try:
            assert await reopened.read() == published
            async with open_supervisor(reopened, model(), workspace=Workspace(tmp_path)) as sup:
                assert sup.output(sid) == "ok" and not sup.is_running(sid)
                assert await sup.send(sid, "fourth") == "started"
                await sup.wait_idle(sid)
        finally:
            await reopened.aclose()
