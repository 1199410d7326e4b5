"""A person's interrupt with no message (``Supervisor.interrupt_turn``, the web page's buttons).

Shell commands write their process-group id (``$$`` of ``sh -c``, the group leader)
to a file, so the test can check the process table after the abort.
"""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import (
    ANSWER_ANYTHING,
    SHELL_BUDGET,
    Rule,
    Step,
    live_group_members,
    poll_until,
    read_pid,
    running,
    shell,
)

from halo_actors.agent.repair import UI_INTERRUPTED
from halo_actors.core.events import AgentDone, ToolCalled, ToolReturned, TurnCompleted

SLOW = "echo $$ > slow.pid; sleep 60 && echo x"
WAIT_FOR_GO = "while [ ! -f go ]; do sleep 0.02; done; echo went"
"""A command that runs until the test lets it end (no race with the interrupt)."""
TWO_BATCHES = Rule(
    match=r"^work",
    steps=(
        Step(calls=(shell(WAIT_FOR_GO),)),
        Step(text="SECOND MODEL CALL", calls=(shell("echo second"),)),
        Step(text="done"),
    ),
)
LONG_COMMAND = Rule(match=r"^long", steps=(Step(calls=(shell(SLOW),)), Step(text="after")))


async def test_a_hard_interrupt_without_a_message_kills_the_running_command_group(
    tmp_path: Path,
) -> None:
    """Rule: hard = "now, killing the running command's process group"; nothing is queued."""
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, LONG_COMMAND, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long job")
            await poll_until(lambda: read_pid(tmp_path / "slow.pid") is not None)
            pgid = read_pid(tmp_path / "slow.pid")
            assert pgid is not None and live_group_members(pgid)
            assert await rt.sup.interrupt_turn(sid, "hard") is True
            await rt.sup.wait_idle(sid)
            assert live_group_members(pgid) == []
            (result,) = await rt.results(sid)
            assert result.ui_result == UI_INTERRUPTED
            assert not rt.sup.state(sid).mailbox
            assert [c.stop_reason for c in await rt.completes(sid)] == ["interrupted"]
            assert len(await rt.events(sid, AgentDone)) == 1
            await rt.assert_replay_matches(sid)


async def test_a_soft_interrupt_lets_the_batch_finish_and_stops_at_the_boundary(
    tmp_path: Path,
) -> None:
    """Rule: soft = "the next batch boundary, as a queued message does": the command in
    flight completes and the next model call never happens."""
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, TWO_BATCHES, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "work")
            await rt.wait_for(sid, ToolCalled)
            assert await rt.sup.interrupt_turn(sid, "soft") is True
            (tmp_path / "go").touch()
            await rt.sup.wait_idle(sid)
            (result,) = await rt.events(sid, ToolReturned)
            assert result.result == "went\n[exit code 0]" and not result.is_error
            assert len(await rt.events(sid, ToolCalled)) == 1  # no second model call
            assert [c.stop_reason for c in await rt.completes(sid)] == ["interrupted"]
            await rt.assert_replay_matches(sid)


async def test_an_interrupt_of_an_idle_session_does_nothing(tmp_path: Path) -> None:
    with trio.fail_after(SHELL_BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "hello")
            await rt.sup.wait_idle(sid)
            before = len(await rt.records(sid))
            assert await rt.sup.interrupt_turn(sid, "hard") is False
            assert await rt.sup.interrupt_turn(sid, "soft") is False
            assert len(await rt.records(sid)) == before
            assert len(await rt.events(sid, TurnCompleted)) == 1
