"""Hard interrupts: abort the turn now, land what the cut batch produced, drain at once.

Shell commands write their process-group id (``$$`` of ``sh -c``, the group
leader) to a file, so the test can check the process table after the abort.
"""

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
    assert_every_tool_use_answered_once,
    call,
    live_group_members,
    poll_until,
    profiles_with,
    read_pid,
    running,
    shell,
)

from halo_actors.agent.repair import INTERRUPTED_RESULT, NOT_RUN_RESULT, UI_INTERRUPTED, UI_NOT_RUN
from halo_actors.core.events import (
    AgentDone,
    RoundStarted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from halo_actors.tools.shell import process_group_alive


def slow(name: str) -> str:
    """A compound command that would run for a minute; it records its group id first."""
    return f"echo $$ > {name}.pid; sleep 60 && echo x"


FAST_AND_SLOW = Rule(
    match=r"^work",
    steps=(
        Step(text="two jobs", calls=(shell("echo fast"), shell(slow("slow")))),
        Step(text="SECOND MODEL CALL"),
    ),
)
THREE_SLOW = Rule(
    match=r"^work",
    steps=(Step(calls=(shell(slow("a")), shell(slow("b")), shell(slow("c")))),),
)


async def inputs_by_id(rt: Runtime, sid: str) -> dict[str, str]:
    return {e.tool_use_id: str(e.tool_input["command"]) for e in await rt.events(sid, ToolCalled)}


async def test_hard_interrupt_lands_the_finished_results_of_a_cut_batch(tmp_path: Path) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, FAST_AND_SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            await rt.wait_for(sid, ToolReturned, lambda e: e.result.startswith("fast"))
            await poll_until(lambda: read_pid(tmp_path / "slow.pid") is not None)
            assert await rt.sup.interrupt(sid, "stop that") == "queued"
            await rt.sup.wait_idle(sid)

            commands = await inputs_by_id(rt, sid)
            by_command = {commands[r.tool_use_id]: r for r in await rt.results(sid)}
            assert by_command["echo fast"].result == "fast\n[exit code 0]"
            assert not by_command["echo fast"].is_error
            assert by_command[slow("slow")].result == INTERRUPTED_RESULT
            assert by_command[slow("slow")].is_error
            messages = rt.sup.state(sid).messages
            assert_every_tool_use_answered_once(messages)
            assert "SECOND MODEL CALL" not in [m.text() for m in messages]
            await rt.assert_replay_matches(sid)


async def test_hard_interrupt_kills_the_running_commands_whole_process_group(
    tmp_path: Path,
) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, FAST_AND_SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            await poll_until(lambda: read_pid(tmp_path / "slow.pid") is not None)
            pgid = read_pid(tmp_path / "slow.pid")
            assert pgid is not None
            await poll_until(lambda: len(live_group_members(pgid)) == 2)  # sh and its sleep
            await rt.sup.interrupt(sid, "stop that")
            await rt.wait_for(sid, ToolReturned, lambda e: e.result == INTERRUPTED_RESULT)

            assert not process_group_alive(pgid)
            assert live_group_members(pgid) == []
            await rt.sup.wait_idle(sid)


async def test_hard_interrupt_marks_the_cut_call_do_not_retry_and_unstarted_ones_not_run(
    tmp_path: Path,
) -> None:
    profiles = profiles_with(max_parallel_tools=1)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, THREE_SLOW, ANSWER_ANYTHING, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            pid_files = [tmp_path / f"{n}.pid" for n in "abc"]
            await poll_until(lambda: any(read_pid(p) is not None for p in pid_files))
            await rt.sup.interrupt(sid, "stop that")
            await rt.sup.wait_idle(sid)

            (started,) = [p.stem for p in pid_files if p.exists()]  # one call ran at a time
            commands = await inputs_by_id(rt, sid)
            outcome = {commands[r.tool_use_id].split("> ")[1][0]: r for r in await rt.results(sid)}
            assert outcome[started].result == INTERRUPTED_RESULT
            for name in set("abc") - {started}:
                assert outcome[name].result == NOT_RUN_RESULT
            assert all(r.is_error for r in outcome.values())
            assert_every_tool_use_answered_once(rt.sup.state(sid).messages)


async def test_hard_interrupt_marks_pending_ui_entries_by_whether_they_started(
    tmp_path: Path,
) -> None:
    profiles = profiles_with(max_parallel_tools=1)
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, THREE_SLOW, ANSWER_ANYTHING, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            pid_files = [tmp_path / f"{n}.pid" for n in "abc"]
            await poll_until(lambda: any(read_pid(p) is not None for p in pid_files))
            await rt.sup.interrupt(sid, "stop that")
            await rt.sup.wait_idle(sid)

            (started,) = [p.stem for p in pid_files if p.exists()]  # one call ran at a time
            shown = {
                str(u.tool_input["command"]).split("> ")[1][0]: u.output
                for u in rt.sup.state(sid).ui
                if u.kind == "tool" and u.tool_input is not None
            }
            assert shown == {n: UI_INTERRUPTED if n == started else UI_NOT_RUN for n in "abc"}
            await rt.assert_replay_matches(sid)


async def test_queued_message_drains_on_the_same_wake_up_after_a_hard_interrupt(
    tmp_path: Path,
) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, FAST_AND_SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work now")
            await poll_until(lambda: read_pid(tmp_path / "slow.pid") is not None)
            await rt.sup.interrupt(sid, "stop that")
            await rt.sup.wait_idle(sid)

            events = [r.event for r in await rt.records(sid)]
            cut = next(i for i, e in enumerate(events) if isinstance(e, TurnCompleted))
            assert events[cut] == TurnCompleted(batch_boundary=True, stop_reason="interrupted")
            after = [e for e in events[cut + 1 :] if isinstance(e, RoundStarted | AgentDone)]
            assert isinstance(after[0], RoundStarted)  # no AgentDone: the same run goes on
            assert after[0].text == "stop that"
            assert after[0].kind == "drained"
            assert after[0].resumed_after_interrupt
            assert isinstance(after[1], AgentDone)
            assert rt.sup.state(sid).mailbox == []


async def test_a_session_may_interrupt_itself_without_hanging(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    def interrupt_self(found: re.Match[str]) -> tuple[Step, ...]:
        target = found[1]
        return (
            Step(calls=(call("interrupt_session", session_id=target, message="self-wake"),)),
            Step(text="SECOND MODEL CALL"),
        )

    rules = (Rule(match=r"^interrupt yourself (\S+)$", build=interrupt_self), ANSWER_ANYTHING)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, f"interrupt yourself {sid}")
            await rt.sup.wait_idle(sid)

            _opening, woken = await rt.rounds(sid)
            assert woken.text == f"(from: session {sid}) self-wake"
            assert woken.resumed_after_interrupt
            assert (await rt.completes(sid))[0].stop_reason == "interrupted"
            assert "SECOND MODEL CALL" not in [m.text() for m in rt.sup.state(sid).messages]
            assert_every_tool_use_answered_once(rt.sup.state(sid).messages)
            assert not rt.sup.is_running(sid)


async def test_a_child_may_interrupt_its_ancestor_without_hanging(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    def interrupt_parent(found: re.Match[str]) -> tuple[Step, ...]:
        target = found[1]
        return (
            Step(calls=(call("interrupt_session", session_id=target, message="look at this"),)),
            Step(text="child done"),
        )

    rules = (
        Rule(
            match=r"^spawn (\S+)$",
            build=lambda found: (
                Step(calls=(call("start_session", task=f"wake {found[1]}"),)),
                Step(text="PARENT SECOND CALL", delay=5),
            ),
        ),
        Rule(match=r"wake (\S+)$", build=interrupt_parent),
        ANSWER_ANYTHING,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(parent, f"spawn {parent}")
            await rt.sup.wait_idle(parent)

            (child,) = rt.sup.children(parent)
            woken = [r for r in await rt.rounds(parent) if "look at this" in r.text]
            # The interrupt's message opens the round it woke; the child's final report may
            # be queued before that round opens, and is then merged into it (a race).
            assert len(woken) == 1
            assert woken[0].text.startswith(f"(from: session {child}) look at this")
            assert (await rt.completes(parent))[0].stop_reason == "interrupted"
            assert "PARENT SECOND CALL" not in [m.text() for m in rt.sup.state(parent).messages]
            assert "child done" in [m.text() for m in rt.sup.state(child).messages]


async def test_hard_interrupt_of_an_idle_session_just_runs_the_message(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            assert await rt.sup.interrupt(sid, "wake up") == "started"
            await rt.sup.wait_idle(sid)

            (opening,) = await rt.rounds(sid)
            assert (opening.kind, opening.text) == ("opening", "wake up")
            assert [c.stop_reason for c in await rt.completes(sid)] == ["end_turn"]
