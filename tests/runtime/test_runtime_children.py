"""Starting a sub-session (``start_child``, the ``start_session`` tool): the child comes
into the log with its task, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, running

from halo_actors.core.errors import EventTooLarge
from halo_actors.core.events import (
    AgentDone,
    AgentStarted,
    Event,
    MessageQueued,
    Record,
    SessionCreated,
    TurnCompleted,
    kind_of,
)
from halo_actors.core.log import MemoryEventLog
from halo_actors.core.state import QueuedMessage, SessionState
from halo_actors.runtime.rounds import round_started
from halo_actors.runtime.session import SessionActor


class AppendCountingLog(MemoryEventLog):
    """The in-memory log, remembering each append's session and event kinds."""

    def __init__(self, *, max_event_bytes: int = 64 * 1024) -> None:
        super().__init__(max_event_bytes=max_event_bytes)
        self.appends: list[tuple[str, list[str]]] = []

    def append_nowait(self, session_id: str, *events: Event) -> list[Record]:
        self.appends.append((session_id, [kind_of(e) for e in events]))
        return super().append_nowait(session_id, *events)


async def test_a_child_is_created_with_its_task_and_opening_round_in_one_append(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: no reader ever sees a sub-session without the task it was started for; on a
    pipelined log the turn that takes the task opens in the same append."""
    log = AppendCountingLog()
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            child = await rt.sup.start_child(parent, "default", "child task")
            await rt.sup.wait_idle(parent)

            first = next(kinds for sid, kinds in log.appends if sid == child)
            assert first == ["session_created", "message_queued", "user", "agent_start"]
            queued = (await rt.records(child))[1].event
            assert getattr(queued, "text", None) == "child task"
            assert getattr(queued, "source_session_id", None) == parent
            assert rt.sup.output(child) == "ok"


async def test_a_task_too_large_for_a_round_creates_no_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: bad input gets a clear error and changes nothing (no child without its task)."""
    log = AppendCountingLog(max_event_bytes=4096)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING, log=log) as rt:
            parent = await rt.sup.create_session(namespace="cli")
            before = len(await rt.records())
            with pytest.raises(EventTooLarge, match="cannot open a round"):
                await rt.sup.start_child(parent, "default", "x" * 5000)

            assert rt.sup.children(parent) == []
            assert len(await rt.records()) == before


async def opened_child(log: MemoryEventLog) -> SessionActor:
    """A child as ``start_child`` leaves it on a pipelined log: created with its task and
    opening round in one append, its run claimed with that round, its task not started."""
    actor = SessionActor(SessionState("cli_a>child"), log)
    opening = round_started([QueuedMessage("a task", (), "cli_a")], "opening", False)
    await actor.emit(
        SessionCreated(agent_id="default", parent_id="cli_a"),
        MessageQueued(text="a task", source_session_id="cli_a"),
        opening,
        AgentStarted(),
    )
    assert actor.claim_run(opening)
    return actor


async def test_a_run_claimed_with_its_round_closes_that_turn_if_a_cascade_began_first() -> None:
    """Rule: a child's opening round is logged with its creation; when a stop reaches the
    child before its run's task has started, the task makes no model call and closes
    the turn as a cut one would be (``complete`` stopped, then ``agent_done``)."""
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        actor = await opened_child(log)
        actor.aborts_pending += 1  # as a cascade marks its members before it aborts them

        assert await actor.open_round("opening") is None
        closing = [r.event for r in await log.read()][-2:]
        assert closing == [TurnCompleted(stop_reason="stopped"), AgentDone()]
        assert not actor.running and not actor.state.turn_open


async def test_a_hard_interrupt_before_the_run_began_ends_the_opened_turn_unanswered() -> None:
    """Rule: a hard interrupt cuts the turn that is open, even one whose run's task has
    not started: that turn ends ``interrupted`` before any model call, and the next
    round takes the interrupting message."""
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        actor = await opened_child(log)
        delivered = await actor.deliver("stop that", (), None, "hard")
        assert not delivered.start_run

        following = await actor.open_round("opening")
        assert following is not None and following.text == "stop that"
        assert following.resumed_after_interrupt
        completes = [r.event for r in await log.read() if isinstance(r.event, TurnCompleted)]
        assert completes == [TurnCompleted(batch_boundary=True, stop_reason="interrupted")]
        assert actor.running and actor.state.turn_open


async def test_a_run_that_ends_before_taking_its_opened_round_leaves_none_to_the_next() -> None:
    """Rule: an opened round belongs to the run claimed with it. A run whose task ended
    before taking it (a crash, a broken profile: ``close_run`` closes the turn) leaves
    nothing for the next run, which opens its own round from the mailbox."""
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        actor = await opened_child(log)
        await actor.close_run("the run failed before its first step")
        assert not actor.running and not actor.state.turn_open

        assert actor.claim_run()  # a run with nothing logged for it (a compaction, say)
        assert await actor.open_round("opening") is None  # empty mailbox: the run ends
        assert not actor.cuttable
