"""crash-replay: SIGKILL a runtime mid-turn, restart it on the same workspace, replay.

A child process (:mod:`halo_actors.demo.crash_child`) runs the planner tree on
this scenario's workspace: the planner has started a researcher and both are
streaming; two user notes are queued behind the planner's turn. The demo kills
that process with SIGKILL (no shutdown code runs) and opens the runtime again
in-process on the same workspace. Recovery folds the log back into the same
tree, closes each cut turn (an ``error`` saying the runtime restarted, then a
terminal ``complete``), and starts a run for the queued notes: they are
answered in one round, nobody has to write again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from ...agent.scripted import Rule, Script, ScriptedModel, Step
from ...core.events import (
    ErrorRaised,
    MessageQueued,
    Record,
    RoundStarted,
    TurnCompleted,
    decode_record,
)
from ...runtime.profiles import Profiles
from ...runtime.supervisor import Supervisor
from ..board import Board
from ..scenario import Scenario
from ..stage import WAIT_SECONDS, DemoStuck, Stage
from .common import profile, start

TASK = "plan the database migration"
NOTES = ("keep the old tables for a week", "and write down the rollback steps")
CHILD = (sys.executable, "-m", "halo_actors.demo.crash_child")
_LONG = (
    "Step one: freeze writes. Step two: copy the tables. Step three: switch readers over. "
    "Step four: watch the error rates for a day. Step five: drop the old copies. "
) * 2


def _answer_all(found: re.Match[str]) -> tuple[Step, ...]:
    parts = [p for p in found.string.split("\n\n") if p.strip()]
    return (
        Step(text=f"Back after the restart, with all {len(parts)} of your messages.", chunk=12),
    )


def crash_model() -> ScriptedModel:
    """The planner tree's model; its slow streams are what the kill cuts (not scaled)."""
    planner = Script(
        rules=(
            Rule(
                match=TASK,
                steps=(
                    Step(
                        text="Planning; a researcher checks the old schema.\n",
                        calls=(
                            start(
                                "research the old schema", agent="researcher", label="researcher"
                            ),
                        ),
                    ),
                    Step(text=_LONG, chunk=8, delay=0.2),
                ),
            ),
            Rule(kind="drained", build=_answer_all),
            Rule(kind="opening", build=_answer_all),
        )
    )
    researcher = Script(rules=(Rule(steps=(Step(text=_LONG, chunk=8, delay=0.25),)),))
    return ScriptedModel({"planner": planner, "researcher": researcher})


PROFILES = Profiles(
    {
        "planner": profile("planner", "researcher", description="plans migrations"),
        "researcher": profile("researcher", description="reads schemas"),
    }
)


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    buffer = b""
    while chunk := await stream.receive_some():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line


def _python_path() -> str:
    """This package's root first, so the child imports the same halo_actors as we do."""
    package_root = str(Path(__file__).resolve().parents[3])
    return os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)


def _is_note_queued(record: Record) -> bool:
    return isinstance(record.event, MessageQueued) and record.event.text in NOTES


async def _run_and_kill(stage: Stage) -> int:
    """Start the child runtime, show its records, SIGKILL it once both notes are queued."""
    log = (stage.workspace / "crash-child.log").open("wb")
    proc = await trio.lowlevel.open_process(
        [*CHILD, str(stage.workspace)],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=stage.workspace,  # so the tour's leftover check would see it
        env={**os.environ, "PYTHONPATH": _python_path()},
    )
    try:
        assert proc.stdout is not None
        board, queued = Board(), 0
        with trio.move_on_after(WAIT_SECONDS):
            async for line in _lines(proc.stdout):
                record = decode_record(line)
                stage.show(record)
                board.apply(record)
                queued += _is_note_queued(record)
                if queued == len(NOTES):
                    break
        if queued < len(NOTES):
            raise DemoStuck(f"the child runtime never queued both notes (see {log.name})")
        await stage.snapshot("the other process's tree, just before the kill", board)
        await stage.note(f"SIGKILL to the runtime process (pid {proc.pid}) in the middle of a turn")
        os.kill(proc.pid, signal.SIGKILL)
        return await proc.wait()
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            log.close()


async def play(stage: Stage) -> None:
    await stage.note("a separate runtime process starts the planner tree on this workspace")
    status = await _run_and_kill(stage)
    await stage.check("the runtime process died of SIGKILL", status == -signal.SIGKILL)
    killed_at = stage.seen
    await stage.note("the runtime starts again, in this process, on the same workspace")
    async with stage.runtime(crash_model(), PROFILES, after_seq=killed_at) as sup:
        roots = [s.session_id for s in sup.sessions() if s.parent_id is None]
        if not roots:
            raise DemoStuck("the restarted runtime found no session in the log")
        planner = roots[0]
        await stage.snapshot("the tree rebuilt from the log", sup.sessions())
        await stage.note("recovery starts a run for the planner's two queued notes")
        await stage.wait_idle(sup, planner)
        await _check_recovered(stage, sup, await stage.records(), killed_at)
        rounds = [e for e in await _events(stage, planner) if isinstance(e, RoundStarted)]
        await stage.check(
            "the first round after the restart took both kept notes",
            rounds[-1].drained == len(NOTES) and all(n in rounds[-1].text for n in NOTES),
        )


async def _events(stage: Stage, session_id: str) -> list[object]:
    return [r.event for r in await stage.records(session_id)]


async def _check_recovered(
    stage: Stage, sup: Supervisor, records: list[Record], killed_at: int
) -> None:
    states = sup.sessions()
    await stage.check(
        "the log rebuilt the whole tree (planner and researcher)",
        len(states) == 2 and any(s.parent_id for s in states),
    )
    for state in states:
        after = [r.event for r in records if r.session_id == state.session_id and r.seq > killed_at]
        kinds = [type(e) for e in after if isinstance(e, ErrorRaised | TurnCompleted)][:2]
        said = next((e.error for e in after if isinstance(e, ErrorRaised)), "")
        await stage.check(
            f"{state.title}'s cut turn was closed: error ({said!r}) then complete",
            kinds == [ErrorRaised, TurnCompleted] and "restarted" in said and not state.turn_open,
        )
    lost = [r for r in records if isinstance(r.event, MessageQueued) and r.seq > killed_at]
    await stage.check("nothing was queued or lost by the recovery itself", not lost)


SCENARIO = Scenario(
    name="crash-replay",
    title="SIGKILL a runtime mid-turn; the restart rebuilds the tree from the log",
    play=play,
    shown=(
        "a runtime process was killed with SIGKILL while two sessions were mid-turn",
        "restarting on the same workspace folded the SQLite log back into the same tree",
        "each cut turn was closed explicitly: an error saying the runtime restarted, then complete",
        "messages queued before the crash survived it, and the restart answered them in one round",
    ),
    docs=("docs/design/actors.md (Recovery)", "docs/design/event-log.md"),
    budget=40.0,
)
