"""Command process groups a killed runtime left running: recorded in the log when they
start, killed on recovery when still alive and provably the runtime's own.

These tests kill a real runtime process with SIGKILL (``crashing_runtime.py``) and use
the real clock and real process groups.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio
from runtime_harness import (
    ANSWER_ANYTHING,
    SHELL_BUDGET,
    live_group_members,
    poll_until,
    running,
)

from halo_actors.agent.repair import INTERRUPTED_RESULT, UI_INTERRUPTED
from halo_actors.core.conversation import ToolUseBlock
from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    CommandStarted,
    ErrorRaised,
    MessageQueued,
    Notified,
    RoundStarted,
    SessionCreated,
    ToolCalled,
)
from halo_actors.core.log import EventFilter, MemoryEventLog, SqliteEventLog
from halo_actors.runtime.embed import log_path
from halo_actors.runtime.orphans import process_identity
from halo_actors.tools.shell import process_group_alive

CRASHING_RUNTIME = Path(__file__).with_name("crashing_runtime.py")
SID = "cli_1700000000000_0badcafe"
CRASH_BUDGET = 40.0
"""Seconds (real) for a test that starts a whole runtime process (slow on a busy machine)."""
ORPHAN_SECONDS = 30
"""How long the orphaned command sleeps before it writes: longer than the test takes, so
only a kill stops it (the group is checked alive before recovery and gone after)."""


async def started_group(child: trio.Process) -> int:
    """The pgid the child runtime prints once its command's group is logged."""
    assert child.stdout is not None
    buffered = b""
    while b"\n" not in buffered:
        chunk = await child.stdout.receive_some()
        assert chunk, "the runtime exited before its command started"
        buffered += chunk
    word, pgid = buffered.split(b"\n")[0].split()
    assert word == b"started"
    return int(pgid)


async def test_recovery_kills_the_command_group_a_killed_runtime_left_running(
    tmp_path: Path,
) -> None:
    """Rule: "Record each running command's process group in the log when it starts;
    on recovery, kill every recorded group that is still alive and provably ours ...
    before closing the cut turn." The runtime is SIGKILLed during ``sleep N; echo
    after > after.txt``; the restart kills the orphan before it can write."""
    command = f"sleep {ORPHAN_SECONDS}; echo after > after.txt"
    argv = [sys.executable, str(CRASHING_RUNTIME), str(tmp_path), command]
    with trio.fail_after(CRASH_BUDGET):
        child = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
        try:
            pgid = await started_group(child)
            await poll_until(lambda: len(live_group_members(pgid)) == 2)  # sh and its sleep
            child.kill()  # SIGKILL: no cleanup of any kind
            await child.wait()
            assert process_group_alive(pgid)  # orphaned: nobody will end it
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
            if child.stdout is not None:
                await child.stdout.aclose()

        log = await SqliteEventLog.open(log_path(tmp_path))
        try:
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                assert not process_group_alive(pgid)
                assert live_group_members(pgid) == []
                (sid,) = [s.session_id for s in rt.sup.sessions()]
                records = await rt.log.read(EventFilter(session_id=sid))
                events = [r.event for r in records]
                killed = next(i for i, e in enumerate(events) if isinstance(e, Notified))
                assert str(pgid) in events[killed].text  # type: ignore[union-attr]
                restarted = next(i for i, e in enumerate(events) if isinstance(e, ErrorRaised))
                assert killed < restarted  # killed before the cut turn was closed
                state = rt.sup.state(sid)
                assert not state.turn_open and not state.commands
                tools = [u for u in state.ui if u.kind == "tool"]
                assert [u.output for u in tools] == [UI_INTERRUPTED]
                assert [r.result for r in await rt.results(sid)] == [INTERRUPTED_RESULT]
        finally:
            await log.aclose()
    assert not (tmp_path / "after.txt").exists()


async def test_recovery_never_kills_a_group_whose_pid_is_not_provably_ours(
    tmp_path: Path,
) -> None:
    """Rule: only a group "still alive and provably ours (never a reused pid)" is
    killed. A recorded pgid now led by a process with another start time, or recorded
    under another boot, is somebody else's: it is left alone."""
    with trio.fail_after(SHELL_BUDGET):
        other = await trio.lowlevel.open_process(
            ["sleep", "30"], cwd=tmp_path, start_new_session=True
        )
        try:
            real = process_identity(other.pid)
            assert real is not None
            reused = CommandStarted(pgid=other.pid, started=real.started - 1, boot_id=real.boot_id)
            rebooted = CommandStarted(pgid=other.pid, started=real.started, boot_id="elsewhere")
            log = MemoryEventLog()
            use = ToolUseBlock(id="toolu_a", name="shell_exec", input={"command": "sleep 30"})
            await log.append(
                SID,
                SessionCreated(agent_id="default"),
                MessageQueued(text="go"),
                RoundStarted(text="go", drained=1),
                AgentStarted(),
                AssistantReplied(content=(use,), stop_reason="tool_use"),
                ToolCalled(tool_name=use.name, tool_use_id=use.id, tool_input=use.input),
                reused,
                rebooted,
            )
            async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
                assert process_group_alive(other.pid)
                assert not rt.sup.state(SID).turn_open
        finally:
            other.kill()
            await other.wait()
