"""Regressions found by the chaos suite's abort driver (``tests/chaos``), one per bug."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, SHELL_BUDGET, Rule, Step, running

from halo_actors.core.events import (
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    RoundStarted,
    SessionArchived,
    kind_of,
)
from halo_actors.core.log import SqliteEventLog

SLOW = Rule(match=r"^slow", steps=(Step(text="slow work", chunk=2, delay=0.01),))


async def test_a_stop_racing_a_round_start_folds_each_message_at_most_once(
    tmp_path: Path,
) -> None:
    for yields in range(8):  # the stop lands before, during and after the round opens
        db = tmp_path / f"run{yields}" / ".halo" / "events.db"
        log = await SqliteEventLog.open(db)  # appends yield to the writer thread
        with trio.fail_after(SHELL_BUDGET):
            async with running(tmp_path, SLOW, ANSWER_ANYTHING, log=log) as rt:
                sid = await rt.sup.create_session(namespace="cli")
                await rt.sup.send(sid, "slow one")
                for _ in range(yields):
                    await trio.lowlevel.checkpoint()
                await rt.sup.stop(sid)
                await rt.sup.wait_idle(sid)

                events = [r.event for r in await rt.records(sid)]
                drained = sum(e.drained for e in events if isinstance(e, RoundStarted))
                folded = sum(e.count for e in events if isinstance(e, MailboxFolded))
                queued = sum(isinstance(e, MessageQueued) for e in events)
                assert drained + folded == queued == 1, [kind_of(e) for e in events]
                await rt.assert_replay_matches(sid)
        await log.aclose()


async def test_a_stop_that_meets_an_archive_never_revives_the_archived_session(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    for archive_first in (True, False):
        with trio.fail_after(BUDGET):
            async with running(tmp_path, SLOW, ANSWER_ANYTHING) as rt:
                sid = await rt.sup.create_session(namespace="cli")
                await rt.sup.send(sid, "slow one")
                await rt.sup.send(sid, "queued behind it")
                async with trio.open_nursery() as nursery:
                    first, second = (
                        (rt.sup.archive, rt.sup.stop)
                        if archive_first
                        else (rt.sup.stop, rt.sup.archive)
                    )
                    nursery.start_soon(first, sid)
                    nursery.start_soon(second, sid)
                await rt.sup.wait_idle(sid)

                state = rt.sup.state(sid)
                assert state.lifecycle == "archived"
                kinds = [kind_of(r.event) for r in await rt.records(sid)]
                after = kinds[kinds.index(kind_of(SessionArchived())) :]
                assert kind_of(RoundStarted(text="")) not in after
                assert after.count(kind_of(SessionArchived())) == 1
                discarded = sum(e.count for e in await rt.events(sid, MailboxDiscarded))
                folded = sum(e.count for e in await rt.events(sid, MailboxFolded))
                drained = sum(r.drained for r in await rt.rounds(sid))
                assert discarded + folded + drained == 2
                await rt.assert_replay_matches(sid)
