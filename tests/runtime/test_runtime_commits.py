"""How many commits the runtime's durability waits cost (SQLite log, real clock: its
writer thread is invisible to the autojump clock). Counts, never timings."""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import ANSWER_ANYTHING, BUDGET, running

from halo_actors.core.events import TextStreamed
from halo_actors.core.log import MAX_BACKLOG, SqliteEventLog


async def test_a_message_and_the_turn_it_starts_share_one_commit(tmp_path: Path) -> None:
    """Rule: the runtime waits for durability only where it is observable (``send``'s
    acknowledgement, the end of a run) and, pipelined, a turn of an instant model is
    one step: a message, its whole turn and the run's end are one commit, so ``send``
    and ``wait_idle`` together wait for one commit, not two."""
    log = await SqliteEventLog.open(tmp_path / ".halo" / "events.db")
    try:
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            with trio.fail_after(BUDGET):
                sid = await rt.sup.create_session()
                for _ in range(20):
                    before = log.commits
                    await rt.sup.send(sid, "hello")
                    await rt.sup.wait_idle(sid)
                    assert log.commits - before == 1
                    assert log.last_seq == log.stamped_seq
            assert rt.sup.output(sid) == "ok"
    finally:
        await log.aclose()


async def test_a_session_emitting_faster_than_the_writer_commits_waits_past_the_backlog(
    tmp_path: Path,
) -> None:
    """Rule: pipelined appends never let more than ``MAX_BACKLOG`` records wait for their
    commit: the emit that crosses the bound waits for the writer (a streaming model
    faster than the disk is slowed to it, never queued without end)."""
    log = await SqliteEventLog.open(tmp_path / ".halo" / "events.db")
    try:
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            with trio.fail_after(BUDGET):
                sid = await rt.sup.create_session()
                actor = rt.sup.actor(sid)
                waits = 0
                for _ in range(3 * MAX_BACKLOG):  # no checkpoint of its own between emits
                    before = log.last_seq
                    await actor.emit(TextStreamed(text="x"))
                    assert log.stamped_seq - log.last_seq <= MAX_BACKLOG
                    waits += log.last_seq > before
                assert waits >= 2  # it waited, and only when past the bound
                assert waits < 3 * MAX_BACKLOG // 100
    finally:
        await log.aclose()
