"""A failing model ends the turn with an ``error`` then ``complete``; the session lives on.
A reply cut by the token limit answers its dropped calls as not run."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Script, Step, call, running

from halo_actors.agent.model import ModelEvent, ModelRejected, ModelRequest
from halo_actors.agent.repair import NOT_RUN_RESULT, repair
from halo_actors.agent.scripted import ScriptedModel
from halo_actors.core.conversation import Message, ToolResultBlock, ToolUseBlock
from halo_actors.core.events import (
    AgentDone,
    AssistantReplied,
    ErrorRaised,
    Event,
    MessageQueued,
    Notified,
    RoundStarted,
    SessionCreated,
    TurnCompleted,
)
from halo_actors.core.log import MemoryEventLog

SID = "cli_1700000000000_0badcafe"

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


class StrictModel(ScriptedModel):
    """Refuses, as a provider API does, a conversation in which a tool call has no
    result; ``always`` refuses every request."""

    def __init__(self, *, always: bool = False) -> None:
        super().__init__({"default": Script(rules=(ANSWER_ANYTHING,))})
        self.always = always
        self.seen: list[tuple[Message, ...]] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.seen.append(request.messages)
        answered = answered_ids(request.messages)
        open_calls = [u.id for m in request.messages for u in m.tool_uses() if u.id not in answered]
        if open_calls or self.always:
            raise ModelRejected(f"tool_use ids without tool_result: {open_calls}")
        async for item in super().stream(request):
            yield item


def answered_ids(messages: tuple[Message, ...]) -> set[str]:
    return {b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)}


def history_with_an_unanswered_call() -> list[Event]:
    """A finished turn whose tool call never got a result (as a buggy writer might log)."""
    call_block = ToolUseBlock(id="toolu_lost", name="shell_exec", input={"command": "true"})
    return [
        SessionCreated(agent_id="default"),
        MessageQueued(text="go"),
        RoundStarted(text="go", drained=1),
        AssistantReplied(content=(call_block,), stop_reason="tool_use"),
        TurnCompleted(),
        AgentDone(),
    ]


async def test_a_request_refused_as_malformed_is_retried_once_with_a_fresh_full_repair(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log = MemoryEventLog()
    await log.append(SID, *history_with_an_unanswered_call())
    model = StrictModel()
    with trio.fail_after(BUDGET):
        async with running(tmp_path, log=log, model=model) as rt:
            actor = rt.sup.actor(SID)
            actor.model_messages()  # the repair cache, then poisoned: it trusts everything
            assert actor._repair is not None
            actor._repair._valid = 10**6
            await rt.sup.send(SID, "next")
            await rt.sup.wait_idle(SID)

            first, retried = model.seen
            assert "toolu_lost" not in answered_ids(first)
            assert tuple(retried) == tuple(repair(list(first)))  # the whole history repaired
            (notice,) = await rt.events(SID, Notified)
            assert notice.text.startswith("model refused the request (tool_use ids")
            assert rt.sup.state(SID).last_output == "ok"
            assert await rt.events(SID, ErrorRaised) == []


async def test_a_request_refused_again_after_the_repair_ends_the_turn_with_an_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = StrictModel(always=True)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "hello")
            await rt.sup.wait_idle(sid)

            assert len(model.seen) == 2  # the request, and one retry after the repair
            assert len(await rt.events(sid, Notified)) == 1
            (error,) = await rt.events(sid, ErrorRaised)
            assert error.error.startswith("model error: refused again after a full repair")
            assert [c.stop_reason for c in await rt.completes(sid)] == ["error"]
            assert await rt.sup.send(sid, "still there?") == "started"  # the session lives on
