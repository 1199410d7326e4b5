"""Restart: the log rebuilds every session; a turn a crash left open is closed, repaired,
and its mailbox kept. Replaying a session's records always gives its live state.

SQLite tests use the real clock: its writer thread is invisible to the autojump clock.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from runtime_harness import (
    ANSWER_ANYTHING,
    BUDGET,
    SHELL_BUDGET,
    Rule,
    Step,
    assert_every_tool_use_answered_once,
    call,
    poll_until,
    read_pid,
    running,
    shell,
)

from halo_actors.agent.repair import INTERRUPTED_RESULT, UI_INTERRUPTED
from halo_actors.core.conversation import TextBlock, ToolUseBlock
from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    ErrorRaised,
    Event,
    FlagsChanged,
    MailboxFolded,
    MessageQueued,
    RoundStarted,
    SessionArchived,
    SessionCreated,
    TextStreamed,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from halo_actors.core.log import MemoryEventLog, SqliteEventLog
from halo_actors.core.state import replay

SID = "cli_1700000000000_0badcafe"


def crashed_mid_turn() -> list[Event]:
    """A session whose turn was running a two-call batch (one call answered) when the
    process died, with a message queued behind it."""
    uses = (
        ToolUseBlock(id="toolu_a", name="shell_exec", input={"command": "echo a"}),
        ToolUseBlock(id="toolu_b", name="shell_exec", input={"command": "sleep 60"}),
    )
    return [
        SessionCreated(agent_id="default"),
        MessageQueued(text="go"),
        RoundStarted(text="go", drained=1),
        FlagsChanged(interrupt_requested=False, self_kick=False),
        AgentStarted(),
        TextStreamed(text="two jobs"),
        AssistantReplied(content=(TextBlock(text="two jobs"), *uses), stop_reason="tool_use"),
        *[ToolCalled(tool_name=u.name, tool_use_id=u.id, tool_input=u.input) for u in uses],
        ToolReturned(tool_name="shell_exec", tool_use_id="toolu_a", result="a\n[exit code 0]"),
        MessageQueued(text="later"),
        FlagsChanged(interrupt_requested=True),
    ]


async def sqlite_log_with(path: Path, events: list[Event]) -> None:
    log = await SqliteEventLog.open(path)
    try:
        await log.append(SID, *events)
    finally:
        await log.aclose()


async def test_restart_mid_turn_closes_the_turn_with_an_error_then_complete(
    tmp_path: Path,
) -> None:
    db = tmp_path / ".halo" / "events.db"
    with trio.fail_after(SHELL_BUDGET):
        await sqlite_log_with(db, crashed_mid_turn())
        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                await rt.sup.wait_idle(SID)
                tail = [r.event for r in await rt.records(SID)][len(crashed_mid_turn()) :]
                assert [type(e).__name__ for e in tail[:5]] == [
                    "ToolReturned",
                    "ErrorRaised",
                    "TurnCompleted",
                    "AgentDone",
                    "RoundStarted",  # the queued message's run (see the next test)
                ]
                assert isinstance(tail[1], ErrorRaised) and "restarted" in tail[1].error
                assert tail[2] == TurnCompleted(stop_reason="restarted")
                state = rt.sup.state(SID)
                assert not state.turn_open
                assert not rt.sup.is_running(SID)
                await rt.assert_replay_matches(SID)
        finally:
            await log.aclose()


async def test_restart_mid_turn_repairs_the_conversation(tmp_path: Path) -> None:
    db = tmp_path / ".halo" / "events.db"
    with trio.fail_after(SHELL_BUDGET):
        await sqlite_log_with(db, crashed_mid_turn())
        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                state = rt.sup.state(SID)
                assert_every_tool_use_answered_once(state.messages)
                cut = [r for r in await rt.results(SID) if r.tool_use_id == "toolu_b"]
                assert [(r.result, r.is_error) for r in cut] == [(INTERRUPTED_RESULT, True)]
                tools = [u for u in state.ui if u.kind == "tool"]
                assert [u.output for u in tools] == ["a\n[exit code 0]", UI_INTERRUPTED]
        finally:
            await log.aclose()


async def test_restart_answers_a_message_queued_before_the_crash(tmp_path: Path) -> None:
    db = tmp_path / ".halo" / "events.db"
    with trio.fail_after(SHELL_BUDGET):
        await sqlite_log_with(db, crashed_mid_turn())
        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                await rt.sup.wait_idle(SID)
                rounds = await rt.rounds(SID)
                assert [(r.text, r.drained) for r in rounds] == [("go", 1), ("later", 1)]
                assert rounds[-1].kind == "opening"
                assert not rounds[-1].resumed_after_interrupt  # false for an opening turn
                state = rt.sup.state(SID)
                assert state.mailbox == [] and not state.interrupt_requested
                assert state.last_output == "ok"
                assert await rt.sup.send(SID, "new") == "started"  # and it goes on as usual
                await rt.sup.wait_idle(SID)
                assert (await rt.rounds(SID))[-1].text == "new"
                await rt.assert_replay_matches(SID)
        finally:
            await log.aclose()


async def test_restart_lands_a_fold_a_crash_left_parked_in_an_open_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = MemoryEventLog()
    await log.append(SID, *crashed_mid_turn(), MailboxFolded(text="later", count=1))
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            state = rt.sup.state(SID)
            assert state.mailbox == []
            assert state.parked_folds == ()
            assert state.messages[-1].text() == "later"  # after the closing results
            assert_every_tool_use_answered_once(state.messages)
            await rt.assert_replay_matches(SID)


async def test_restart_during_a_manual_compaction_clears_the_flag_without_an_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = MemoryEventLog()
    await log.append(
        SID,
        SessionCreated(agent_id="default"),
        FlagsChanged(is_compacting=True),
        MessageQueued(text="queued during it"),
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            await rt.sup.wait_idle(SID)
            state = rt.sup.state(SID)
            assert not state.is_compacting
            assert await rt.events(SID, ErrorRaised) == []  # no turn was open
            assert [r.text for r in await rt.rounds(SID)] == ["queued during it"]
            assert state.mailbox == []


async def test_leaving_the_supervisor_mid_turn_closes_the_turn_and_kills_its_command(
    tmp_path: Path,
) -> None:
    rules = (Rule(match=r"^work", steps=(Step(calls=(shell("echo $$ > w.pid; sleep 60"),)),)),)
    db = tmp_path / ".halo" / "events.db"
    with trio.fail_after(SHELL_BUDGET):
        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, *rules, ANSWER_ANYTHING, log=log) as rt:
                sid = await rt.sup.create_session(namespace="cli")
                await rt.sup.send(sid, "work")
                await poll_until(lambda: read_pid(tmp_path / "w.pid") is not None)
                await rt.sup.send(sid, "queued behind")
        finally:
            await log.aclose()

        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as again:
                await again.sup.wait_idle(sid)
                state = again.sup.state(sid)
                assert not state.turn_open
                assert [r.text for r in await again.rounds(sid)] == ["work", "queued behind"]
                assert_every_tool_use_answered_once(state.messages)
                errors = await again.events(sid, ErrorRaised)
                assert len(errors) == 1  # closed on the way out; nothing left for recovery
                completes = [c.stop_reason for c in await again.completes(sid)]
                assert completes[0] == "restarted" and len(completes) == 2
                await again.assert_replay_matches(sid)
        finally:
            await log.aclose()


async def test_rebuilding_from_the_log_equals_the_live_state_after_a_busy_scenario(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        Rule(
            match=r"^lead",
            steps=(
                Step(
                    calls=(
                        call("start_session", task="worker A"),
                        call("start_session", task="worker B"),
                    )
                ),
                Step(text="lead waiting", delay=2),
            ),
        ),
        Rule(match=r"worker A", steps=(Step(text="A working", delay=3),)),
        Rule(
            match=r"worker B",
            steps=(
                Step(text="B starts", calls=(call("list_sessions"),)),
                Step(text="B done", delay=1),
            ),
        ),
        Rule(match=r"urgent", steps=(Step(calls=(call("continue_task"),)), Step(text="handled"))),
        Rule(kind="resume", steps=(Step(text="resumed", chunk=2),)),
        Rule(steps=(Step(text="ok", delay=0.5),)),
    )
    log = MemoryEventLog()
    with trio.fail_after(BUDGET * 3):
        async with running(tmp_path, *rules, log=log) as rt:
            root = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(root, "lead the work")
            await rt.wait_for(root, ToolReturned, count=2)
            worker_a, worker_b = sorted(
                rt.sup.children(root), key=lambda c: rt.sup.state(c).description or ""
            )
            await rt.sup.send(root, "a person's question")
            await rt.sup.interrupt(worker_a, "urgent: look here", source=root)
            await rt.wait_for(worker_b, ToolReturned)
            await rt.sup.send(worker_b, "more for B", source=root)
            await rt.sup.stop(worker_b)
            await rt.sup.wait_idle(root)
            await rt.sup.compact(root)
            await rt.sup.wait_idle(root)
            await rt.sup.archive(worker_b)
            await rt.sup.wait_idle(root)

            live = {s.session_id: s for s in rt.sup.sessions()}
            assert len(live) == 3
            for sid, state in live.items():
                assert replay(sid, await rt.records(sid)) == state
            assert [r.kind for r in await rt.rounds(worker_a)].count("resume") == 1

        async with running(tmp_path, ANSWER_ANYTHING, log=log) as again:
            for sid, state in live.items():
                assert again.sup.state(sid) == state


async def test_restart_answers_queued_messages_across_a_tree_and_the_child_reports_up(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    child, archived = f"{SID}>helper", f"{SID}>gone"
    log = MemoryEventLog()
    await log.append(SID, SessionCreated(agent_id="default"))
    await log.append(child, SessionCreated(agent_id="default", parent_id=SID))
    await log.append(child, MessageQueued(text="check the schema", source_session_id=SID))
    await log.append(archived, SessionCreated(agent_id="default", parent_id=SID))
    await log.append(archived, MessageQueued(text="never answered"), SessionArchived())
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            await rt.sup.wait_all_idle()
            (asked,) = await rt.rounds(child)
            assert asked.text.endswith("check the schema")
            (report,) = await rt.rounds(SID)  # the child's final report woke its parent
            assert report.from_session_ids == (child,)
            assert await rt.rounds(archived) == []
            for sid in (SID, child, archived):
                assert not rt.sup.is_running(sid)
                await rt.assert_replay_matches(sid)


async def test_a_deleted_id_created_again_is_a_new_session_that_survives_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / ".halo" / "events.db"
    with trio.fail_after(SHELL_BUDGET):
        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                await rt.sup.create_session(SID)
                await rt.sup.send(SID, "first life")
                await rt.sup.wait_idle(SID)
                await rt.sup.delete(SID)
                assert not rt.sup.exists(SID)
                await rt.sup.create_session(SID, title="again")
                await rt.sup.send(SID, "second life")
                await rt.sup.wait_idle(SID)
                live = rt.sup.state(SID)
                assert [m.text() for m in live.messages] == ["second life", "ok"]
                await rt.assert_replay_matches(SID)  # the old life is not replayed into it
        finally:
            await log.aclose()

        log = await SqliteEventLog.open(db)
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as again:
                state = again.sup.state(SID)  # still there after the restart
                assert (state.lifecycle, state.title) == ("live", "again")
                assert [m.text() for m in state.messages] == ["second life", "ok"]
                assert [u.text for u in state.ui if u.kind == "user"] == ["second life"]
        finally:
            await log.aclose()
