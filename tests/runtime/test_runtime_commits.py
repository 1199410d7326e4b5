"""How many commits the runtime's durability waits cost (SQLite log, real clock: its
writer thread is invisible to the autojump clock). Counts, never timings."""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import ANSWER_ANYTHING, BUDGET, running

from halo_actors.core.log import SqliteEventLog


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
