"""Compaction: manual, at turn end, and mid-turn at a batch boundary; what a message
arriving during one does (queue only, or queue and interrupt at that boundary)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import trio
import trio.testing
from runtime_harness import (
    ANSWER_ANYTHING,
    BUDGET,
    Rule,
    Runtime,
    Script,
    SlowCompactionModel,
    Step,
    call,
    profiles_with,
    running,
)

from halo_actors.agent.model import ModelEvent, ModelRequest
from halo_actors.core.events import Compacted, FlagsChanged, Record, RoundStarted, kind_of

SUMMARY_LINE = "[summary of the earlier conversation]"
TOOL_TURN = Rule(
    match=r"^tools",
    steps=(Step(text="checking", calls=(call("list_sessions"),)), Step(text="SECOND MODEL CALL")),
)


def tags(records: list[Record]) -> list[str]:
    return [kind_of(r.event) for r in records]


async def chat(rt: Runtime, sid: str, *texts: str) -> None:
    for text in texts:
        await rt.sup.send(sid, text)
        await rt.sup.wait_idle(sid)


async def test_manual_compact_replaces_old_history_with_the_summary(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(tmp_path, ANSWER_ANYTHING) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first", "second")
            assert await rt.sup.compact(sid) == "started"
            await rt.sup.wait_idle(sid)

            (compacted,) = await rt.events(sid, Compacted)
            assert compacted.replaced == 2
            assert compacted.summary == "The conversation so far, in short: 2 earlier messages."
            assert [m.text() for m in rt.sup.state(sid).messages] == [
                f"{SUMMARY_LINE}\n{compacted.summary}",
                "second",
                "ok",
            ]
            assert not rt.sup.state(sid).is_compacting
            assert len(await rt.rounds(sid)) == 2  # the compaction is no turn of its own
            await rt.assert_replay_matches(sid)


async def test_message_during_a_manual_compaction_is_queued_without_interrupt_requested(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = SlowCompactionModel(Script(rules=(ANSWER_ANYTHING,)), seconds=5)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first", "second")
            await rt.sup.compact(sid)
            await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)

            assert await rt.sup.send(sid, "during") == "queued"
            assert not rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            raised = [f for f in await rt.events(sid, FlagsChanged) if f.interrupt_requested]
            assert raised == []
            last = (await rt.rounds(sid))[-1]
            assert last.text == "during"
            assert not last.resumed_after_interrupt
            assert [m.text().split("\n")[0] for m in rt.sup.state(sid).messages] == [
                SUMMARY_LINE,
                "second",
                "ok",
                "during",
                "ok",
            ]


async def test_manual_compact_of_a_busy_session_runs_at_the_end_of_its_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(match=r"^slow", steps=(Step(text="slow answer", delay=1),)), ANSWER_ANYTHING)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            await rt.sup.send(sid, "slow one")
            await trio.testing.wait_all_tasks_blocked()
            assert await rt.sup.compact(sid) == "queued"
            await rt.sup.wait_idle(sid)

            seen = tags(await rt.records(sid))
            last_complete = len(seen) - 1 - seen[::-1].index("complete")
            assert seen.index("compacted") < last_complete  # before the turn closed
            assert rt.sup.state(sid).messages[0].text().startswith(SUMMARY_LINE)


async def test_auto_compaction_at_turn_end_when_over_compress_at(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rules = (Rule(steps=(Step(text="a long answer " * 20),)),)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, *rules, profiles=profiles_with(compress_at=50)) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            assert await rt.events(sid, Compacted) == []  # nothing older than the last round
            await chat(rt, sid, "second")

            (compacted,) = await rt.events(sid, Compacted)
            assert compacted.replaced == 2
            seen = tags(await rt.records(sid))
            last_reply = len(seen) - 1 - seen[::-1].index("assistant")
            assert (
                last_reply < seen.index("compacted") < len(seen) - 1 - seen[::-1].index("complete")
            )
            assert rt.sup.state(sid).messages[0].text().startswith(SUMMARY_LINE)
            await rt.assert_replay_matches(sid)


async def test_mid_turn_compaction_runs_at_a_batch_boundary_when_over_compress_at(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(BUDGET):
        async with running(
            tmp_path, TOOL_TURN, ANSWER_ANYTHING, profiles=profiles_with(compress_at=20)
        ) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first", "tools please")

            seen = tags(await rt.records(sid))
            compacted_at = seen.index("compacted")
            assert seen.index("tool_result") < compacted_at  # after the batch …
            assert "assistant" in seen[compacted_at:]  # … before the next model call
            texts = [m.text() for m in rt.sup.state(sid).messages]
            assert "SECOND MODEL CALL" in texts


async def test_message_during_a_mid_turn_compaction_interrupts_at_that_same_boundary(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = SlowCompactionModel(Script(rules=(TOOL_TURN, ANSWER_ANYTHING)), seconds=2)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model, profiles=profiles_with(compress_at=20)) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            await rt.sup.send(sid, "tools please")
            await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)
            assert rt.sup.state(sid).turn_open

            assert await rt.sup.send(sid, "during") == "queued"
            assert rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            texts = [m.text() for m in rt.sup.state(sid).messages]
            assert "SECOND MODEL CALL" not in texts
            completes = await rt.completes(sid)
            assert completes[1].stop_reason == "interrupted"
            drained = await rt.wait_for(sid, RoundStarted, lambda e: e.text == "during")
            assert drained.resumed_after_interrupt


async def test_message_during_a_turn_end_compaction_is_queued_without_interrupt_requested(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = SlowCompactionModel(Script(rules=(ANSWER_ANYTHING,)), seconds=2)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model, profiles=profiles_with(compress_at=20)) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            await rt.sup.send(sid, "second")
            await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)
            assert rt.sup.state(sid).messages[-1].text() == "ok"  # the turn's work is done

            assert await rt.sup.send(sid, "during") == "queued"
            assert not rt.sup.state(sid).interrupt_requested
            await rt.sup.wait_idle(sid)

            last = (await rt.rounds(sid))[-1]
            assert last.text == "during"
            assert not last.resumed_after_interrupt


class FailingCompactionModel(SlowCompactionModel):
    """Answers turns; a compaction request fails (a model outage mid-compaction)."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose == "compact":
            raise ConnectionError("the model is unreachable")
        async for item in super().stream(request):
            yield item


async def test_a_manual_compaction_whose_model_fails_ends_its_run_with_an_error_and_agent_done(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = FailingCompactionModel(Script(rules=(ANSWER_ANYTHING,)), seconds=0)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first", "second")
            before = len(await rt.records(sid))
            assert await rt.sup.compact(sid) == "started"
            await rt.sup.wait_idle(sid)

            tail = tags((await rt.records(sid))[before:])
            assert tail == ["flags", "flags", "error", "agent_done"]
            assert not rt.sup.is_running(sid)
            assert not rt.sup.state(sid).is_compacting
            assert rt.sup.state(sid).messages[0].text() == "first"  # nothing lost
            assert await rt.sup.send(sid, "third") == "started"  # the session still works
            await rt.sup.wait_idle(sid)
            await rt.assert_replay_matches(sid)


async def test_a_stop_lets_a_mid_turn_compaction_under_way_finish_within_its_grace(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: "If a compaction is in flight the fold is parked and lands when the
    compaction ends" (``docs/design/turns.md``: a compaction under way finishes within
    ``compaction_grace`` of a cut). A stop during a mid-turn compaction keeps its
    summary, and the stop's fold lands after it."""
    model = SlowCompactionModel(Script(rules=(TOOL_TURN, ANSWER_ANYTHING)), seconds=3)
    profiles = profiles_with(compress_at=20, compaction_grace=10)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            await rt.sup.send(sid, "tools please")
            await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)
            await rt.sup.send(sid, "note for later")
            await rt.sup.stop(sid)

            seen = tags(await rt.records(sid))
            assert "compacted" in seen
            assert seen.index("compacted") < seen.index("stopped")
            state = rt.sup.state(sid)
            texts = [m.text() for m in state.messages]
            assert texts[0].startswith(SUMMARY_LINE)
            assert texts[-1] == "note for later"  # the fold, after the summary
            assert "SECOND MODEL CALL" not in texts
            assert not state.is_compacting and not state.turn_open
            await rt.assert_replay_matches(sid)


async def test_a_compaction_past_its_grace_after_a_stop_is_abandoned(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Rule: a compaction under way when its turn is cut gets ``compaction_grace`` seconds
    to finish, no more: past it the stop abandons it (the history stays as it was) and
    still completes."""
    model = SlowCompactionModel(Script(rules=(TOOL_TURN, ANSWER_ANYTHING)), seconds=60)
    profiles = profiles_with(compress_at=20, compaction_grace=2)
    with trio.fail_after(BUDGET):
        async with running(tmp_path, model=model, profiles=profiles) as rt:
            sid = await rt.sup.create_session(namespace="cli")
            await chat(rt, sid, "first")
            await rt.sup.send(sid, "tools please")
            await rt.wait_for(sid, FlagsChanged, lambda e: e.is_compacting is True)
            start = trio.current_time()
            await rt.sup.stop(sid)

            assert trio.current_time() - start < 5  # the grace, not the model's minute
            seen = tags(await rt.records(sid))
            assert "compacted" not in seen and seen[-1] == "stopped"
            state = rt.sup.state(sid)
            assert state.messages[0].text() == "first"
            assert not state.is_compacting and not state.turn_open
            await rt.assert_replay_matches(sid)
