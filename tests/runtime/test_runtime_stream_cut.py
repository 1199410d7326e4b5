"""Streamed text lands on a hard abort (with the cut marker), never on a timeout retry."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import trio
import trio.testing
from runtime_harness import ANSWER_ANYTHING, BUDGET, Rule, Step, call, running

from halo_actors.agent.model import ModelEvent, ModelRequest
from halo_actors.agent.repair import STREAM_CUT_MARKER
from halo_actors.agent.scripted import Script, ScriptedModel
from halo_actors.core.conversation import TextBlock, ThinkingBlock, ToolUseBlock
from halo_actors.core.events import AssistantReplied, Notified, TextStreamed, ThinkingStreamed
from halo_actors.runtime.supervisor import Supervisor

STREAMING = Rule(
    match=r"^tell",
    steps=(
        Step(
            thinking="let me think",
            text="abcdefghij",
            chunk=2,
            delay=1,
            calls=(call("list_sessions"),),
        ),
    ),
)


async def test_hard_abort_mid_stream_lands_the_streamed_text_with_the_cut_marker(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, STREAMING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "tell me")
            await rt.wait_for(sid, TextStreamed, count=2)  # "ab", "cd" shown so far
            await rt.sup.interrupt(sid, "enough")
            await rt.sup.wait_idle(sid)

            cut = (await rt.events(sid, AssistantReplied))[0]
            assert cut.stop_reason == "interrupted"
            assert cut.content == (TextBlock(text="abcd\n\n" + STREAM_CUT_MARKER),)
            assert [m.text() for m in rt.sup.state(sid).messages] == [
                "tell me",
                "abcd\n\n" + STREAM_CUT_MARKER,
                "enough",
                "ok",
            ]
            await rt.assert_replay_matches(sid)


async def test_hard_abort_mid_stream_drops_the_partial_thinking_and_tool_call(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, STREAMING, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "tell me")
            await rt.wait_for(sid, ThinkingStreamed)
            await rt.wait_for(sid, TextStreamed, count=2)
            await rt.sup.interrupt(sid, "enough")
            await rt.sup.wait_idle(sid)

            blocks = [b for m in rt.sup.state(sid).messages for b in m.content]
            assert not any(isinstance(b, ThinkingBlock | ToolUseBlock) for b in blocks)
            assert await rt.results(sid) == []


async def test_model_timeout_retry_streams_again_and_lands_the_text_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^tell", steps=(Step(text="hello world", chunk=5, timeouts=1),)),)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "tell me")
            await rt.sup.wait_idle(sid)

            streamed = "".join(e.text for e in await rt.events(sid, TextStreamed))
            assert streamed == "hello world" * 2  # the retry streams from scratch
            assert len(await rt.events(sid, Notified)) == 1
            (reply,) = await rt.events(sid, AssistantReplied)
            assert reply.content == (TextBlock(text="hello world"),)
            texts = [m.text() for m in rt.sup.state(sid).messages]
            assert texts == ["tell me", "hello world"]
            assert not any(STREAM_CUT_MARKER in t for t in texts)
            assert (await rt.completes(sid))[0].stop_reason == "end_turn"


class ClosureWatchingModel(ScriptedModel):
    """The ScriptedModel, noting for each stream whether its ``finally`` (where a provider
    releases its connection) ran in the task that read the stream, while its turn was open."""

    def __init__(self, script: Script) -> None:
        super().__init__({"default": script})
        self.sup: Supervisor | None = None
        self.closed_in_turn: list[bool] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        reader = trio.lowlevel.current_task()
        try:
            async for item in super().stream(request):
                yield item
        finally:
            assert self.sup is not None
            turn_open = self.sup.state(request.session_id).turn_open
            self.closed_in_turn.append(turn_open and trio.lowlevel.current_task() is reader)


async def test_every_model_stream_is_closed_by_its_turn_cut_or_not(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = ClosureWatchingModel(Script(rules=(STREAMING, ANSWER_ANYTHING)))
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt:
            model.sup = rt.sup
            sid = await rt.sup.create_session(namespace="cli")
            await rt.sup.send(sid, "tell me")
            await rt.wait_for(sid, TextStreamed, count=2)
            await rt.sup.interrupt(sid, "enough")  # cut mid-stream; "enough" streams whole
            await rt.sup.wait_idle(sid)

            assert model.closed_in_turn == [True, True]
