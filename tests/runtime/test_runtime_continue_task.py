"""continue_task: one resume turn per interrupt, never more (no perpetual motion)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Runtime, Step, call, running

from halo_actors.core.events import (
    FlagsChanged,
    MessageQueued,
    RoundStarted,
    SessionStopped,
    ToolReturned,
)
from halo_actors.tools.base import ToolContext, call_tool
from halo_actors.tools.files import Workspace
from halo_actors.tools.registry import tools_for

CONTINUE = call("continue_task")
LONG = Rule(match=r"^long", steps=(Step(text="long work", delay=1),))
URGENT_THEN_CONTINUE = Rule(
    match=r"urgent",
    steps=(Step(text="handled urgent", calls=(CONTINUE,)), Step(text="back soon")),
)
RESUME = Rule(kind="resume", steps=(Step(text="resuming the long work"),))


async def continue_task_answers(rt: Runtime, sid: str) -> list[str]:
    return [r.result for r in await rt.results(sid) if r.tool_name == "continue_task"]


async def test_continue_task_answers_not_interrupted_in_a_turn_not_preceded_by_an_interrupt(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^go", steps=(Step(calls=(CONTINUE,)), Step(text="done"))),)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "go")
            await rt.sup.wait_idle(sid)

            assert await continue_task_answers(rt, sid) == ["not_interrupted"]
            assert [r.kind for r in await rt.rounds(sid)] == ["opening"]
            assert not rt.sup.state(sid).self_kick


async def test_continue_task_answers_no_turn_after_stop(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.interrupt(sid, "urgent")  # the next round is resumed-after-interrupt
            await rt.wait_for(sid, RoundStarted, lambda e: e.resumed_after_interrupt)
            await rt.sup.stop(sid)

            context = ToolContext(
                session_id=sid,
                agent_id="default",
                workspace=Workspace(tmp_path),
                tree=rt.sup,
                turn=rt.sup.actor(sid),
            )
            answer = await call_tool(tools_for(()), context, "continue_task", {})
            assert answer.text == "no_turn"
            assert not rt.sup.state(sid).self_kick
            assert not rt.sup.is_running(sid)


async def test_continue_task_after_a_hard_interrupt_gets_one_resume_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, LONG, URGENT_THEN_CONTINUE, RESUME) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.interrupt(sid, "urgent thing")
            await rt.sup.wait_idle(sid)

            rounds = await rt.rounds(sid)
            assert [(r.kind, r.resumed_after_interrupt) for r in rounds] == [
                ("opening", False),
                ("drained", True),
                ("resume", False),
            ]
            assert (await continue_task_answers(rt, sid))[0].startswith("ok")
            assert rt.sup.state(sid).messages[-1].text() == "resuming the long work"
            assert not rt.sup.state(sid).self_kick
            completes = await rt.completes(sid)
            assert [c.batch_boundary for c in completes] == [True, True, False]


async def test_kick_is_dropped_when_a_new_message_drains_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (
        LONG,
        Rule(
            match=r"urgent",
            steps=(Step(calls=(CONTINUE,)), Step(text="handled urgent", delay=1)),
        ),
        RESUME,
        ANSWER_ANYTHING,
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long task")
            await trio.testing.wait_all_tasks_blocked()
            await rt.sup.interrupt(sid, "urgent thing")
            await rt.wait_for(sid, ToolReturned, lambda e: e.tool_name == "continue_task")
            await trio.testing.wait_all_tasks_blocked()  # the kick is armed, step 2 streams
            assert rt.sup.state(sid).self_kick
            await rt.sup.send(sid, "a person asks something")
            await rt.sup.wait_idle(sid)

            kinds = [r.kind for r in await rt.rounds(sid)]
            assert kinds == ["opening", "drained", "drained"]  # the flag lived for one turn


# --- kicks ≤ interrupts, under random interleavings ------------------------------

ALWAYS_CONTINUE = Rule(steps=(Step(text="t", delay=1, calls=(CONTINUE,)), Step(text="e", delay=1)))

actions = st.lists(
    st.tuples(
        st.sampled_from(["send", "interrupt", "interrupt", "stop"]),
        st.sampled_from([0, 0.5, 1, 2, 3]),
    ),
    min_size=1,
    max_size=8,
)


async def play(tmp_path: Path, plan: list[tuple[str, float]]) -> None:
    with trio.fail_after(1_000):  # virtual seconds: the run must come to rest
        async with running(tmp_path, ALWAYS_CONTINUE) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            for index, (op, gap) in enumerate(plan):
                await trio.sleep(gap)
                if op == "send":
                    await rt.sup.send(sid, f"message {index}")
                elif op == "interrupt":
                    await rt.sup.interrupt(sid, f"interrupt {index}")
                else:
                    await rt.sup.stop(sid)
            await rt.sup.wait_idle(sid)

            rounds = await rt.rounds(sid)
            interrupts = [
                f for f in await rt.events(sid, FlagsChanged) if f.interrupt_requested is True
            ]
            resumes = [i for i, r in enumerate(rounds) if r.kind == "resume"]
            assert len(resumes) <= len(interrupts)
            for i in resumes:  # each kick answers the interrupted round right before it
                assert rounds[i - 1].resumed_after_interrupt
                assert rounds[i - 1].kind != "resume"
            events = [r.event for r in await rt.records(sid)]
            for i, event in enumerate(events):  # never resurrect: a stop is followed by a
                if isinstance(event, SessionStopped):  # message before any round
                    later = [e for e in events[i:] if isinstance(e, MessageQueued | RoundStarted)]
                    assert not later or isinstance(later[0], MessageQueued)
            armed = [a for a in await continue_task_answers(rt, sid) if a.startswith("ok")]
            assert len(resumes) <= len(armed)
            assert not rt.sup.state(sid).self_kick
            await rt.assert_replay_matches(sid)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=actions)
def test_kicks_never_outnumber_interrupts(tmp_path: Path, plan: list[tuple[str, float]]) -> None:
    trio.run(play, tmp_path, plan, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize(
    "plan",
    [
        [("send", 0), ("interrupt", 0.5), ("interrupt", 0.5), ("interrupt", 2)],
        [("send", 0), ("send", 0.5), ("interrupt", 1.5), ("send", 0)],
        [("send", 0), ("interrupt", 0.5), ("interrupt", 1.5), ("stop", 0), ("send", 1)],
    ],
)
def test_kicks_never_outnumber_interrupts_in_known_interleavings(
    tmp_path: Path, plan: list[tuple[str, float]]
) -> None:
    trio.run(play, tmp_path, plan, clock=trio.testing.MockClock(autojump_threshold=0))
