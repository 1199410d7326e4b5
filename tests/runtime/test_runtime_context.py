"""The context window (``Limits.max_tokens``) and the ``context`` measure, with the
ScriptedModel: no usage comes back, so the runtime's estimate is the measure."""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Step, profiles_with, running

from halo_actors.agent.model import estimate_tokens
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
