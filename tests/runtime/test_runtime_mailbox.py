"""Mailbox and drain: idle messages open a run, busy ones queue and drain as one round."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Step, running

from halo_actors.core.events import (
    AgentStarted,
    AssistantReplied,
    RoundStarted,
    SessionCreated,
    kind_of,
)
from halo_actors.core.log import MemoryEventLog
from halo_actors.core.state import SessionState
from halo_actors.runtime.session import SessionActor

SLOW = Rule(match=r"^slow", steps=(Step(text="slow answer", delay=1),))
MERGED = Rule(match=r"q1", steps=(Step(text="one merged answer"),))


async def test_message_to_an_idle_session_starts_a_run_as_the_opening_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            assert await rt.sup.send(sid, "hello") == "started"
            await rt.sup.wait_idle(sid)

            (opening,) = await rt.rounds(sid)
            assert opening.kind == "opening"
            assert opening.text == "hello"
            assert opening.drained == 1
            assert opening.resumed_after_interrupt is False
            assert [m.text() for m in rt.sup.state(sid).messages] == ["hello", "ok"]


async def test_a_message_after_the_one_that_opened_the_run_waits_for_the_next_round() -> None:
    """Rule: the message that finds the session idle is the opening turn; from then on
    the session is busy and a message queues (with the interrupt flag) for the next
    round, even one that arrives before the run's task has started. With a pipelined log
    the message and its opening round are one append."""
    log = MemoryEventLog()
    with trio.fail_after(BUDGET):
        actor = SessionActor(SessionState("cli_a"), log)
        await actor.emit(SessionCreated(agent_id="default"))
        first = await actor.deliver("first", (), None, "soft")  # no checkpoint: one step
        second = await actor.deliver("second", (), None, "soft")
        assert first.start_run and not second.start_run
        records = await log.read()
        kinds = [kind_of(r.event) for r in records[1:]]
        assert kinds == ["message_queued", "user", "agent_start", "message_queued", "flags"]
        assert first.seq == records[1].seq  # acknowledged at the message's own record

        opening = await actor.open_round("opening")  # what the run's task does first
        assert opening is not None and (opening.kind, opening.text) == ("opening", "first")
        drained = await actor.complete_turn("end_turn")
        assert drained is not None
        assert (drained.kind, drained.text, drained.drained) == ("drained", "second", 1)
        assert await actor.complete_turn("end_turn") is None  # the run ends
        assert not actor.running


async def test_two_questions_queued_during_a_turn_get_one_merged_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SLOW, MERGED) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow please")
            await trio.testing.wait_all_tasks_blocked()  # the model is streaming its answer
            assert await rt.sup.send(sid, "q1?") == "queued"
            assert await rt.sup.send(sid, "q2?") == "queued"
            assert len(rt.sup.state(sid).mailbox) == 2
            await rt.sup.wait_idle(sid)

            opening, merged = await rt.rounds(sid)
            assert opening.text == "slow please"
            assert merged.kind == "drained"
            assert merged.drained == 2
            assert merged.text == "q1?\n\nq2?"
            assert len(await rt.events(sid, AgentStarted)) == 2  # one turn per round
            replies = [e.content for e in await rt.events(sid, AssistantReplied)]
            assert len(replies) == 2  # one model call answered both questions
            state = rt.sup.state(sid)
            assert state.mailbox == []
            assert [m.text() for m in state.messages] == [
                "slow please",
                "slow answer",
                "q1?\n\nq2?",
                "one merged answer",
            ]


async def test_session_messages_are_prefixed_and_user_text_goes_in_raw(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            other = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow please")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "from a person")
            await rt.sup.send(sid, "from a session", source=other)
            await rt.sup.wait_idle(sid)

            merged = (await rt.rounds(sid))[1]
            assert merged.text == f"from a person\n\n(from: session {other}) from a session"
            assert merged.from_session_ids == ("", other)


async def test_batch_boundary_marks_every_complete_but_the_terminal_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        SLOW,
        Rule(match=r"^second", steps=(Step(text="second answer", delay=1),)),
        ANSWER_ANYTHING,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow please")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "second")
            await rt.wait_for(sid, RoundStarted, lambda e: e.text == "second")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "third")
            await rt.sup.wait_idle(sid)

            assert [r.text for r in await rt.rounds(sid)] == ["slow please", "second", "third"]
            assert [c.batch_boundary for c in await rt.completes(sid)] == [True, True, False]
            await rt.assert_replay_matches(sid)


async def test_run_ends_with_agent_done_after_the_terminal_complete(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow please")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "more")
            await rt.sup.wait_idle(sid)

            tags = [kind_of(r.event) for r in await rt.records(sid)]
            runs = [t for t in tags if t in ("user", "complete", "agent_done")]
            assert runs == ["user", "complete", "user", "complete", "agent_done"]
            assert not rt.sup.is_running(sid)
            assert rt.sup.state(sid).status == "idle"


async def test_images_of_drained_messages_travel_with_the_merged_round(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, SLOW, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow please")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.send(sid, "look", images=("data:a",))
            await rt.sup.send(sid, "and this", images=("data:b", "data:c"))
            await rt.sup.wait_idle(sid)

            merged = (await rt.rounds(sid))[1]
            assert merged.images == ("data:a", "data:b", "data:c")
            user = rt.sup.state(sid).messages[2]
            assert [getattr(b, "data", None) for b in user.content] == [
                None,
                "data:a",
                "data:b",
                "data:c",
            ]
