"""Archive discards the mailbox and makes the subtree read-only; delete removes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Runtime, Step, call, running

from halo_actors.core.errors import SessionNotFound, SessionUnavailable
from halo_actors.core.events import (
    AgentStarted,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    SessionArchived,
    SessionDeleted,
    ToolReturned,
)
from halo_actors.core.log import MemoryEventLog

SPAWN = Rule(
    match=r"^spawn",
    steps=(
        Step(calls=(call("start_session", task="child task"),)),
        Step(text="waiting for my child", delay=5),
    ),
)
CHILD = Rule(match=r"child task", steps=(Step(text="child working", delay=5),))


async def busy_tree(rt: Runtime) -> tuple[str, str]:
    """A root whose turn and whose child's turn are both running, each with a queued message."""
    sid = await rt.sup.create_session(namespace="cli")
    await rt.sup.send(sid, "spawn one")
    await rt.wait_for(sid, ToolReturned, lambda e: e.tool_name == "start_session")
    (child,) = rt.sup.children(sid)
    await rt.wait_for(child, AgentStarted)
    await trio.testing.wait_all_tasks_blocked()
    await rt.sup.send(sid, "queued for the root")
    await rt.sup.send(child, "queued for the child", source=sid)
    return sid, child


async def test_archive_discards_the_mailbox(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid, _child = await busy_tree(rt)
            await rt.sup.send(sid, "another one")
            await rt.sup.archive(sid)

            assert await rt.events(sid, MailboxDiscarded) == [MailboxDiscarded(count=2)]
            assert await rt.events(sid, MailboxFolded) == []
            state = rt.sup.state(sid)
            assert state.mailbox == []
            texts = [m.text() for m in state.messages]
            assert "queued for the root" not in "".join(texts)
            assert len(await rt.rounds(sid)) == 1
            await rt.assert_replay_matches(sid)


async def test_a_message_arriving_during_an_archive_is_discarded_with_a_logged_count(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid, _child = await busy_tree(rt)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.sup.archive, sid)
                await rt.wait_for(sid, MailboxDiscarded)  # the archive has begun
                assert await rt.sup.send(sid, "late message") == "queued"

            discarded = sum(e.count for e in await rt.events(sid, MailboxDiscarded))
            queued = await rt.events(sid, MessageQueued)
            drained = sum(r.drained for r in await rt.rounds(sid))
            assert discarded + drained == len(queued) == 3
            assert rt.sup.state(sid).mailbox == []
            await rt.assert_replay_matches(sid)


async def test_archive_cascades_to_the_subtree(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid, child = await busy_tree(rt)
            await rt.sup.archive(sid)

            for session in (sid, child):
                assert rt.sup.state(session).lifecycle == "archived"
                assert not rt.sup.is_running(session)
                assert len(await rt.events(session, SessionArchived)) == 1
            assert await rt.events(child, MailboxDiscarded) == [MailboxDiscarded(count=1)]
            assert rt.sup.state(child).mailbox == []


async def test_archived_sessions_refuse_new_messages(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid, child = await busy_tree(rt)
            await rt.sup.archive(sid)
            before = rt.log.last_seq

            for session in (sid, child):
                with pytest.raises(SessionUnavailable):
                    await rt.sup.send(session, "hello?")
                with pytest.raises(SessionUnavailable):
                    await rt.sup.interrupt(session, "hello?")
                with pytest.raises(SessionUnavailable):
                    await rt.sup.compact(session)
            await trio.sleep(6)
            assert rt.log.last_seq == before  # refused before anything was logged; no run
            assert await rt.sup.archive(sid) is False  # archiving again is a no-op


async def test_archived_sessions_vanish_from_describe_tree(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING) as rt:
            sid, child = await busy_tree(rt)
            assert [d["sessionId"] for d in rt.sup.describe_tree(sid)] == [sid, child]

            await rt.sup.archive(child)
            assert [d["sessionId"] for d in rt.sup.describe_tree(sid)] == [sid]
            await rt.sup.archive(sid)
            assert rt.sup.describe_tree(sid) == []


async def test_delete_removes_the_subtree(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SPAWN, CHILD, ANSWER_ANYTHING, log=log) as rt:
            sid, child = await busy_tree(rt)
            keep = await rt.sup.create_session(namespace="cli")
            assert await rt.sup.delete(sid) is True

            for session in (sid, child):
                assert not rt.sup.exists(session)
                with pytest.raises(SessionNotFound):
                    rt.sup.state(session)
                with pytest.raises(SessionNotFound):
                    await rt.sup.send(session, "hello?")
                assert len(await rt.events(session, SessionDeleted)) == 1
            assert rt.sup.children(sid) == []
            assert rt.sup.exists(keep)

        async with running(tmp_path, ANSWER_ANYTHING, log=log) as again:  # and after a restart
            assert not again.sup.exists(sid)
            assert not again.sup.exists(child)
            assert again.sup.exists(keep)
