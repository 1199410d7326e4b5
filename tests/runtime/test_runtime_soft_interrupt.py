"""Soft interrupts: a message to a busy session ends its turn at the next batch boundary."""

from __future__ import annotations

import re
from pathlib import Path

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
    read_pid,
    running,
    shell,
)

from halo_actors.agent.repair import INTERRUPTED_RESULT, NOT_RUN_RESULT, UI_INTERRUPTED, UI_NOT_RUN
from halo_actors.core.conversation import ToolResultBlock
from halo_actors.core.events import (
    AssistantReplied,
    FlagsChanged,
    ToolReturned,
    kind_of,
)

TWO_SHELLS = Rule(
    match=r"^batch",
    steps=(
        Step(
            text="running two",
            calls=(
                shell("echo $$ > one.pid; sleep 0.3; echo first"),
                shell("echo $$ > two.pid; sleep 0.3; echo second"),
            ),
        ),
        Step(text="SECOND MODEL CALL"),
    ),
)
LISTING = Rule(
    match=r"^list",
    steps=(
        Step(text="planning", delay=1, calls=(call("list_sessions"),)),
        Step(text="SECOND MODEL CALL"),
    ),
)


async def replies_of_first_turn(rt: Runtime, sid: str) -> list[AssistantReplied]:
    """The assistant replies logged between the first round and the second."""
    replies: list[AssistantReplied] = []
    rounds = 0
    for record in await rt.records(sid):
        if kind_of(record.event) == "user":
            rounds += 1
        elif isinstance(record.event, AssistantReplied) and rounds == 1:
            replies.append(record.event)
    return replies


def assert_no_interrupt_markers(rt: Runtime, sid: str) -> None:
    state = rt.sup.state(sid)
    outputs = [u.output for u in state.ui if u.kind == "tool"]
    assert UI_INTERRUPTED not in outputs
    assert UI_NOT_RUN not in outputs
    contents = [
        b.content for m in state.messages for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert INTERRUPTED_RESULT not in contents
    assert NOT_RUN_RESULT not in contents


async def test_soft_interrupt_waits_for_the_whole_parallel_batch(tmp_path: Path) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, TWO_SHELLS, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "batch please")
            await poll_until(lambda: all(read_pid(tmp_path / f) for f in ("one.pid", "two.pid")))
            assert await rt.sup.send(sid, "hey, a question") == "queued"
            assert rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            results = await rt.results(sid)
            assert sorted(r.result.split("\n")[0] for r in results) == ["first", "second"]
            assert all("[exit code 0]" in r.result and not r.is_error for r in results)
            first, _second = await rt.completes(sid)
            assert first.stop_reason == "interrupted"
            assert first.batch_boundary
            assert (await rt.rounds(sid))[1].text == "hey, a question"
            assert_no_interrupt_markers(rt, sid)


async def test_messages_to_a_busy_session_raise_its_interrupt_flag_with_one_record(
    tmp_path: Path,
) -> None:
    """The first message of a busy turn logs the flag with it; the next ones find it up
    and log only themselves (a fan-out's reports, say: one flag record, not one each).
    Every message still opens the next round, and the flag is down after it."""
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, TWO_SHELLS, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "batch please")
            await poll_until(lambda: all(read_pid(tmp_path / f) for f in ("one.pid", "two.pid")))
            for n in range(3):
                assert await rt.sup.send(sid, f"question {n}") == "queued"
            assert rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            raised = [
                r.event
                for r in await rt.records(sid)
                if isinstance(r.event, FlagsChanged) and r.event.interrupt_requested
            ]
            assert len(raised) == 1
            assert [line for line in (await rt.rounds(sid))[1].text.splitlines() if line] == [
                "question 0",
                "question 1",
                "question 2",
            ]
            assert not rt.sup.state(sid).interrupt_requested


async def test_soft_interrupt_ends_the_turn_at_the_boundary_without_another_model_call(
    tmp_path: Path,
) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, TWO_SHELLS, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "batch please")
            await poll_until(lambda: all(read_pid(tmp_path / f) for f in ("one.pid", "two.pid")))
            await rt.sup.send(sid, "hey")
            await rt.sup.wait_idle(sid)

            replies = await replies_of_first_turn(rt, sid)
            assert len(replies) == 1
            texts = [m.text() for m in rt.sup.state(sid).messages]
            assert "SECOND MODEL CALL" not in texts


async def test_message_during_the_first_model_call_lets_the_turn_run_its_batch_then_stop(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LISTING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "list please")
            await trio.testing.wait_all_tasks_blocked()  # inside the first model call
            assert await rt.sup.send(sid, "hey") == "queued"
            await rt.sup.wait_idle(sid)

            (listing,) = await rt.results(sid)
            assert listing.tool_name == "list_sessions"
            assert not listing.is_error
            assert '"code":0' in listing.result
            assert len(await replies_of_first_turn(rt, sid)) == 1
            first = (await rt.completes(sid))[0]
            assert first.stop_reason == "interrupted"
            assert [r.text for r in await rt.rounds(sid)] == ["list please", "hey"]


async def test_message_during_a_first_step_without_tools_lets_the_turn_end_then_drains(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^talk", steps=(Step(text="just talking", delay=1),)), ANSWER_ANYTHING)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "talk to me")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "hey")
            await rt.sup.wait_idle(sid)

            first, _second = await rt.completes(sid)
            assert first.stop_reason == "end_turn"
            assert first.batch_boundary
            _opening, drained = await rt.rounds(sid)
            assert drained.text == "hey"
            assert drained.resumed_after_interrupt
            assert [m.text() for m in rt.sup.state(sid).messages] == [
                "talk to me",
                "just talking",
                "hey",
                "ok",
            ]


async def test_soft_interrupt_leaves_no_interrupted_markers(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LISTING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "list please")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "hey")
            await rt.sup.wait_idle(sid)

            assert_no_interrupt_markers(rt, sid)
            assert all(u.output is not None for u in rt.sup.state(sid).ui if u.kind == "tool")
            assert not rt.sup.state(sid).interrupt_requested
            flags = await rt.events(sid, FlagsChanged)
            assert flags[-1].interrupt_requested is False


def ask(found: re.Match[str]) -> tuple[Step, ...]:
    target = found[1]
    return (Step(calls=(call("query_session", session_id=target, message="status?"),)),)


CHILD_WORK = Rule(
    match=r"child work",
    steps=(
        Step(text="child step one", delay=1, calls=(call("list_sessions"),)),
        Step(text="CHILD SECOND CALL"),
    ),
)


async def test_query_session_to_a_busy_target_queues_and_requests_a_soft_interrupt(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^ask (\S+)$", build=ask), CHILD_WORK, ANSWER_ANYTHING)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "child work")
            await trio.testing.wait_all_tasks_blocked()  # the child's first model call
            await rt.sup.send(parent, f"ask {child}")
            answer = await rt.wait_for(parent, ToolReturned)
            assert '"status":"queued"' in answer.result
            assert rt.sup.state(child).interrupt_requested
            await rt.sup.wait_idle(parent)

            child_texts = [m.text() for m in rt.sup.state(child).messages]
            assert "CHILD SECOND CALL" not in child_texts  # stopped at the batch boundary
            assert (await rt.completes(child))[0].stop_reason == "interrupted"
            drained = (await rt.rounds(child))[1]
            assert drained.text == f"(from: session {parent}) status?"
            assert_no_interrupt_markers(rt, child)


async def test_query_session_to_an_idle_target_just_runs_the_message(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^ask (\S+)$", build=ask), ANSWER_ANYTHING)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.create_session(f"{parent}>idle_kid", parent_id=parent)
            await rt.sup.send(parent, f"ask {child}")
            answer = await rt.wait_for(parent, ToolReturned)
            assert '"status":"started"' in answer.result
            await rt.sup.wait_idle(parent)

            (opening,) = (await rt.rounds(child))[:1]
            assert opening.kind == "opening"
            assert not opening.resumed_after_interrupt
            assert not rt.sup.state(child).interrupt_requested
