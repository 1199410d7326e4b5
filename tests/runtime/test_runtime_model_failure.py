"""A failing model ends the turn with an ``error`` then ``complete``; the session lives on.
A reply cut by the token limit answers its dropped calls as not run."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Step, call, running

from halo_actors.agent.repair import NOT_RUN_RESULT
from halo_actors.core.events import ErrorRaised, Notified, TurnCompleted

FAILING = Rule(match=r"^fail", steps=(Step(text="partial", fail="provider exploded"),))


async def test_model_failure_ends_the_turn_with_an_error_then_complete(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, FAILING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "fail please")
            await rt.sup.wait_idle(sid)

            events = [r.event for r in await rt.records(sid)]
            tail = [e for e in events if isinstance(e, ErrorRaised | TurnCompleted)]
            assert tail == [
                ErrorRaised(error="model error: provider exploded"),
                TurnCompleted(stop_reason="error"),
            ]
            state = rt.sup.state(sid)
            assert state.ui[-1].kind == "error"
            assert state.last_output == ""  # an errored turn is nobody's answer
            assert [m.text() for m in state.messages] == ["fail please"]  # nothing half-landed


async def test_session_stays_usable_after_a_model_failure(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, FAILING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "fail please")
            await rt.sup.wait_idle(sid)
            assert await rt.sup.send(sid, "and now?") == "started"
            await rt.sup.wait_idle(sid)

            assert [c.stop_reason for c in await rt.completes(sid)] == ["error", "end_turn"]
            assert rt.sup.state(sid).last_output == "ok"
            await rt.assert_replay_matches(sid)


async def test_model_timing_out_on_every_retry_ends_the_turn_with_an_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^slow", steps=(Step(text="x", timeouts=10),)),)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "slow model")
            await rt.sup.wait_idle(sid)

            assert len(await rt.events(sid, Notified)) == 3  # the first try and two retries
            (error,) = await rt.events(sid, ErrorRaised)
            assert "timed out" in error.error
            assert (await rt.completes(sid))[-1].stop_reason == "error"


async def test_calls_dropped_at_the_token_limit_are_answered_as_not_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cut = Step(
        text="I will", calls=(call("list_sessions"), call("list_sessions")), stop="max_tokens"
    )
    with trio.fail_after(BUDGET):
        async with running(tmp_path, Rule(match=r"^long", steps=(cut,))) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "long answer")
            await rt.sup.wait_idle(sid)

            results = await rt.results(sid)
            assert [(r.result, r.is_error) for r in results] == [(NOT_RUN_RESULT, True)] * 2
            assert (await rt.completes(sid))[-1].stop_reason == "max_tokens"
