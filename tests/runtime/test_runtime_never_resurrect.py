"""Never resurrect: after a stop no turn starts unless a new message arrives.

Stop clears ``self_kick`` and ``interrupt_requested`` before it waits for the
aborted turn, and a ``continue_task`` that runs while the stop is under way (the
turn is still open, its shell command still dying) answers ``no_turn``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from runtime_harness import (
    ANSWER_ANYTHING,
    BUDGET,
    SHELL_BUDGET,
    Rule,
    Runtime,
    Step,
    call,
    poll_until,
    profiles_with,
    read_pid,
    running,
    shell,
)

from halo_actors.core.events import (
    AgentStarted,
    FlagsChanged,
    RoundStarted,
    SessionArchived,
    SessionDeleted,
    ToolReturned,
)
from halo_actors.tools.base import ToolContext, call_tool
from halo_actors.tools.files import Workspace
from halo_actors.tools.registry import tools_for

CONTINUE = call("continue_task")
LONG = Rule(match=r"^long", steps=(Step(text="long work", delay=0.2),))
RESUME = Rule(kind="resume", steps=(Step(text="RESUMED"),))


async def test_no_turn_starts_after_stop_unless_a_new_message_arrives(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, RESUME, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.stop(sid)
            before = rt.log.last_seq
            await trio.sleep(5)
            assert rt.log.last_seq == before
            assert not rt.sup.is_running(sid)

            assert await rt.sup.send(sid, "back again") == "started"
            await rt.sup.wait_idle(sid)
            last = (await rt.rounds(sid))[-1]
            assert (last.kind, last.text) == ("opening", "back again")
            assert rt.sup.state(sid).lifecycle == "live"


URGENT = Rule(match=r"urgent", steps=(Step(calls=(CONTINUE,)), Step(text="still going", delay=5)))
"""An interrupt whose turn calls ``continue_task``, then keeps going for a while."""


async def armed_kick(rt: Runtime) -> str:
    """A session whose interrupted turn has armed a resume kick and is still running."""
    sid = await rt.sup.create_session(namespace="cli")
    await rt.sup.send(sid, "long task")
    await trio.testing.wait_all_tasks_blocked()
    await rt.sup.interrupt(sid, "urgent")
    await rt.wait_for(sid, ToolReturned, lambda e: e.result.startswith("ok"))
    await trio.testing.wait_all_tasks_blocked()
    return sid


async def test_stop_clears_an_armed_kick_so_no_resume_turn_follows(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, URGENT, RESUME, ANSWER_ANYTHING) as rt:
            sid = await armed_kick(rt)
            assert rt.sup.state(sid).self_kick
            await rt.sup.stop(sid)
            await trio.sleep(6)

            assert not rt.sup.state(sid).self_kick
            assert [r.kind for r in await rt.rounds(sid)] == ["opening", "drained"]
            assert not rt.sup.is_running(sid)


@pytest.mark.parametrize("how", ["archive", "delete"])
async def test_archive_and_delete_clear_an_armed_kick_so_no_run_follows(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, URGENT, RESUME, ANSWER_ANYTHING) as rt:
            sid = await armed_kick(rt)
            actor = rt.sup.actor(sid)  # kept: a deleted session is gone from the supervisor
            assert actor.state.self_kick
            assert await (rt.sup.archive if how == "archive" else rt.sup.delete)(sid)
            after = rt.log.last_seq
            await trio.sleep(6)

            assert rt.log.last_seq == after  # nothing at all happened since
            assert not actor.state.self_kick and not actor.state.interrupt_requested
            assert not actor.running
            assert [r.kind for r in await rt.rounds(sid)] == ["opening", "drained"]
            records = await rt.records(sid)
            kicks = [r for r in records if isinstance(r.event, FlagsChanged)]
            armed = max(r.seq for r in kicks if r.event.self_kick is True)
            cleared = [r.seq for r in kicks if r.event.self_kick is False]
            final = SessionArchived if how == "archive" else SessionDeleted
            (end,) = [r.seq for r in records if isinstance(r.event, final)]
            assert any(armed < seq < end for seq in cleared)  # cleared by the abort itself
            if how == "archive":
                assert rt.sup.state(sid).lifecycle == "archived"
            else:
                assert not rt.sup.exists(sid)


async def test_stop_after_continue_task_armed_in_a_parallel_batch_prevents_the_resume(
    tmp_path: Path,
) -> None:
    batch = (CONTINUE, shell("echo $$ > slow.pid; sleep 30"))
    urgent = Rule(match=r"urgent", steps=(Step(calls=batch), Step(text="after the batch")))
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, LONG, urgent, RESUME, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await rt.wait_for(sid, AgentStarted)
            await rt.sup.interrupt(sid, "urgent")
            await rt.wait_for(sid, ToolReturned, lambda e: e.result.startswith("ok"))
            await poll_until(lambda: read_pid(tmp_path / "slow.pid") is not None)
            await rt.sup.stop(sid)
            await trio.testing.wait_all_tasks_blocked()  # a resume turn would run to its end

            assert [r.kind for r in await rt.rounds(sid)] == ["opening", "drained"]
            assert not rt.sup.state(sid).self_kick
            assert not rt.sup.is_running(sid)


async def test_continue_task_finishing_during_a_stop_cannot_rearm_the_kick(
    tmp_path: Path,
) -> None:
    # The command ignores SIGTERM, so the stop waits out kill_grace with the turn still open.
    stubborn = shell("trap '' TERM; echo $$ > stubborn.pid; sleep 30")
    urgent = Rule(match=r"urgent", steps=(Step(calls=(stubborn,)), Step(text="after")))
    profiles = profiles_with(kill_grace=0.5)
    with trio.fail_after(SHELL_BUDGET):
        async with running(
            tmp_path, LONG, urgent, RESUME, ANSWER_ANYTHING, profiles=profiles
        ) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await rt.wait_for(sid, AgentStarted)
            await rt.sup.interrupt(sid, "urgent")
            round_ = await rt.wait_for(sid, RoundStarted, lambda e: e.text == "urgent")
            assert round_.resumed_after_interrupt  # continue_task would arm here
            await poll_until(lambda: read_pid(tmp_path / "stubborn.pid") is not None)
            actor = rt.sup.actor(sid)
            context = ToolContext(
                session_id=sid,
                agent_id="default",
                workspace=Workspace(tmp_path),
                tree=rt.sup,
                turn=actor,
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.sup.stop, sid)
                await poll_until(lambda: actor.stopping)
                assert rt.sup.state(sid).turn_open  # the aborted turn has not ended yet
                answer = await call_tool(tools_for(()), context, "continue_task", {})
                assert answer.text == "no_turn"
            await trio.testing.wait_all_tasks_blocked()

            assert not rt.sup.state(sid).self_kick
            assert [r.kind for r in await rt.rounds(sid)] == ["opening", "drained"]
            assert not rt.sup.is_running(sid)
