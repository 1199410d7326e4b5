"""The context window (``Limits.max_tokens``) and the ``context`` measure, with the
ScriptedModel: no usage comes back, so the runtime's estimate is the measure."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import trio
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Step, call, profiles_with, running

from halo_actors.agent.model import ModelEvent, ModelRequest, estimate_tokens
from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.core.conversation import Message
from halo_actors.core.events import (
    AssistantReplied,
    Compacted,
    ContextMeasured,
    ErrorRaised,
    RoundStarted,
)

LONG = "x" * 2000
"""About 500 tokens by the estimate."""


async def test_context_is_measured_after_every_response_from_the_estimate(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """Rule: ``ContextMeasured`` is emitted — from real usage with providers, from an
    estimate with the scripted model — against the context window (``max_tokens``)."""
    async with running(
        tmp_path, ANSWER_ANYTHING, profiles=profiles_with(max_tokens=9000, compress_at=8000)
    ) as rt:
        with trio.fail_after(BUDGET):
            sid = await rt.sup.create_session()
            await rt.sup.send(sid, "hello there")
            await rt.sup.wait_idle(sid)
        measured = await rt.events(sid, ContextMeasured)
        state = rt.sup.state(sid)
    assert len(measured) == 1
    assert measured[0].estimated and measured[0].max_tokens == 9000
    assert measured[0].tokens == estimate_tokens(state.messages)
    assert state.measured_tokens is None  # an estimate is not a measure: the state keeps estimating


async def test_a_conversation_over_the_window_is_compacted_before_the_model_call(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """Rule: ``Limits.max_tokens`` (the context window) is enforced: no request goes out
    while the conversation is over it; the turn compacts first, then calls the model."""
    profiles = profiles_with(max_tokens=600, compress_at=590)
    async with running(tmp_path, Rule(steps=(Step(text=LONG),)), profiles=profiles) as rt:
        with trio.fail_after(BUDGET):
            sid = await rt.sup.create_session()
            await rt.sup.send(sid, "first")  # the reply alone is near the window
            await rt.sup.wait_idle(sid)
            assert rt.sup.state(sid).context_tokens < 590  # no compaction at that turn's end
            await rt.sup.send(sid, "y" * 400)  # with it, the conversation is over the window
            await rt.sup.wait_idle(sid)
        records = await rt.records(sid)
    kinds = [type(r.event).__name__ for r in records]
    second = max(i for i, r in enumerate(records) if isinstance(r.event, RoundStarted))
    compacted = kinds.index("Compacted", second)
    replied = kinds.index("AssistantReplied", second)
    assert compacted < replied
    assert not any(isinstance(r.event, ErrorRaised) for r in records)


async def test_a_turn_that_cannot_fit_the_window_ends_with_an_error(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """Rule: ``Limits.max_tokens`` is enforced: a conversation that compaction cannot bring
    under the window ends the turn with an error, and no model call is made."""
    profiles = profiles_with(max_tokens=100, compress_at=90)
    async with running(tmp_path, ANSWER_ANYTHING, profiles=profiles) as rt:
        with trio.fail_after(BUDGET):
            sid = await rt.sup.create_session()
            await rt.sup.send(sid, LONG)
            await rt.sup.wait_idle(sid)
        errors = await rt.events(sid, ErrorRaised)
        replies = await rt.events(sid, AssistantReplied)
        compactions = await rt.events(sid, Compacted)
    assert len(errors) == 1 and "over the context window (100)" in errors[0].error
    assert replies == [] and compactions == []


class RecordingModel(ScriptedModel):
    """The ScriptedModel, keeping every turn request it was sent (compactions aside)."""

    def __init__(self, script: Script) -> None:
        super().__init__({"default": script})
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose != "compact":
            self.requests.append(request)
        async for item in super().stream(request):
            yield item


async def test_the_estimate_is_the_request_the_model_got_plus_its_reply(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """Rule: ``ContextMeasured`` (from the estimate) is the size of the request the model
    got plus its reply, by ``estimate_tokens``, after every response of a long session:
    replies that repair drops (an empty one), tool batches whose results join one
    message, a compaction in the middle — the measure is kept, never re-counted, and
    must stay exactly the count."""
    script = Script(
        rules=(
            Rule(match="^empty", steps=(Step(text=""),)),
            Rule(
                match="^tools",
                steps=(Step(calls=(call("continue_task"), call("continue_task"))), Step(text="t")),
            ),
            Rule(steps=(Step(text="ok " * 20),)),
        )
    )
    model = RecordingModel(script)
    profiles = profiles_with(max_tokens=100_000, compress_at=2_000)
    async with running(tmp_path, profiles=profiles, model=model) as rt:
        with trio.fail_after(BUDGET):
            sid = await rt.sup.create_session()
            for i in range(40):
                await rt.sup.send(sid, ("empty", "tools", "hello " * 30)[i % 3])
                await rt.sup.wait_idle(sid)
        records = await rt.records(sid)
        await rt.assert_replay_matches(sid)
    replies = [r.event for r in records if isinstance(r.event, AssistantReplied)]
    measured = [r.event for r in records if isinstance(r.event, ContextMeasured)]
    assert any(isinstance(r.event, Compacted) for r in records)  # the size was reset once
    assert any(not r.content for r in replies)  # an empty reply: repair drops it
    assert len(replies) == len(measured) == len(model.requests) > 40
    for request, reply, measure in zip(model.requests, replies, measured, strict=True):
        answer = Message(role="assistant", content=reply.content)
        assert measure.estimated
        assert measure.tokens == estimate_tokens((*request.messages, answer))
