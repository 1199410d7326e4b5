"""The turn lifecycle, part two: dropped streams (cut by the proxy) and how the adapter recovers."""

from __future__ import annotations

import itertools

import trio
from acp_harness import Rig
from sandbox_check import needs_sandbox
from web_client import SseStream, wait_until

END_TURN = {"stopReason": "end_turn"}
MARKER = "[reconnected — full reply]\n"


def _numbers(n: int) -> str:
    """The reply to ``slow N``."""
    return "".join(f"{i}\n" for i in range(1, n + 1))


async def test_a_dropped_stream_resumes_after_the_last_event_id_with_no_gap_or_duplicate(
    rig: Rig,
) -> None:
    rig.proxy.cut("/api/web/chat", after_frames=4)  # session, user, "1", "2"
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "slow 12")
    assert answer["result"] == END_TURN
    assert agent.text(session_id) == _numbers(12)
    assert rig.proxy.cuts == 1
    [resume] = rig.proxy.requests("/api/web/subscribe")
    assert resume.headers["last-event-id"].isdigit()


async def test_without_resume_a_gap_is_settled_with_the_whole_reply_behind_a_marker(
    rig: Rig,
) -> None:
    rig.proxy.strip_last_event_id = True
    rig.proxy.cut("/api/web/chat", after_frames=4)
    held = rig.proxy.hold("/api/web/subscribe")
    token = rig.token()
    with trio.fail_after(15):
        async with rig.adapter(token=token) as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "slow 20")
            await rig.proxy.wait_requests("/api/web/subscribe")
            # while the re-attach waits, the turn streams on: the adapter misses these
            async with rig.harness.client(token) as observer:
                query = {"sessionId": session_id}
                async with observer.stream("GET", "/api/web/subscribe", params=query) as sub:
                    stream = SseStream(sub)
                    while [f.type for f in stream.read.frames].count("stream") < 3:
                        await stream.take(1)
            held.gate.set()
            answer = await agent.answer(request_id)
    assert answer["result"] == END_TURN
    text = agent.text(session_id)
    assert text.startswith("1\n2\n")
    assert text.endswith(MARKER + _numbers(20))
    assert text.count(MARKER) == 1


async def test_without_resume_a_turn_that_ended_during_the_drop_gets_only_its_missing_tail(
    rig: Rig,
) -> None:
    rig.proxy.strip_last_event_id = True
    rig.proxy.cut("/api/web/chat", after_frames=4)
    held = rig.proxy.hold("/api/web/subscribe")
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "media")
            await rig.proxy.wait_requests("/api/web/subscribe")
            sup = await rig.sup()
            await sup.wait_idle(session_id)
            held.gate.set()
            answer = await agent.answer(request_id)
    assert answer["result"] == END_TURN
    # streamed "Here", then the settle sent the rest (its MEDIA: line stripped)
    assert agent.text(session_id) == "Here it is:\nDone.\n"
    assert MARKER not in agent.text(session_id)


async def test_a_reattach_that_delivers_frames_resets_the_failure_budget(rig: Rig) -> None:
    rig.proxy.cut("/api/web/chat", after_frames=3)
    rig.proxy.cut("/api/web/subscribe", after_frames=3, times=7)  # session + 2 frames each
    with trio.fail_after(20):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "slow 20")
    assert answer["result"] == END_TURN
    assert rig.proxy.cuts == 8  # more drops than the budget of 5, each after some progress
    assert agent.text(session_id) == _numbers(20)


async def test_five_failed_reattaches_in_a_row_end_the_turn_with_connection_lost(
    rig: Rig,
) -> None:
    rig.proxy.cut("/api/web/chat", after_frames=4)
    rig.proxy.refuse("/api/web/subscribe", times=-1)
    with trio.fail_after(15):
        async with rig.adapter("--reconnect-delay", "0.02") as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "slow 30")
    assert answer["result"] == END_TURN
    assert agent.text(session_id) == "1\n2\n[adapter error] connection lost"
    attempts = [seen.at for seen in rig.proxy.requests("/api/web/subscribe")]
    assert len(attempts) == 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    for gap, backoff in zip(gaps, (0.04, 0.08, 0.16, 0.32), strict=True):
        assert gap >= backoff  # each wait doubles (lower bounds only: the machine may be slow)
    assert rig.proxy.requests("/api/web/history") == []


async def test_a_cancel_during_the_reconnect_backoff_resolves_at_once(rig: Rig) -> None:
    rig.proxy.cut("/api/web/chat", after_frames=4)
    with trio.fail_after(15):
        async with rig.adapter("--reconnect-delay", "30") as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "count to 40")
            await rig.proxy.wait_cuts(1)
            await agent.notify("session/cancel", {"sessionId": session_id})
            with trio.fail_after(3):  # not the 30 s backoff, not the 5 s grace
                answer = await agent.answer(request_id)
            sup = await rig.sup()
            await rig.proxy.wait_requests("/api/web/stop")
            with trio.fail_after(3):
                await sup.wait_idle(session_id)
    assert answer["result"] == {"stopReason": "cancelled"}
    assert rig.proxy.requests("/api/web/subscribe") == []


async def test_a_cancel_during_the_settle_resolves_at_once(rig: Rig) -> None:
    rig.proxy.cut("/api/web/chat", after_frames=4)
    rig.proxy.hold("/api/web/history")  # the settle never gets its answer
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "slow 8")
            await rig.proxy.wait_requests("/api/web/history")
            await agent.notify("session/cancel", {"sessionId": session_id})
            with trio.fail_after(3):
                answer = await agent.answer(request_id)
    assert answer["result"] == {"stopReason": "cancelled"}
    assert agent.text(session_id) == _numbers(8)  # the re-attach delivered it all


@needs_sandbox()
async def test_a_tool_result_whose_call_was_missed_arrives_as_a_self_contained_call(
    rig: Rig,
) -> None:
    rig.proxy.strip_last_event_id = True
    rig.proxy.cut("/api/web/chat", after_frames=3)  # session, user, "Running …"; not the call
    held = rig.proxy.hold("/api/web/subscribe")
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "run sleep 0.6")
            await rig.proxy.wait_requests("/api/web/subscribe")
            sup = await rig.sup()
            await wait_until(
                lambda: any(u.kind == "tool" for u in sup.state(session_id).ui)
            )  # the call is logged; its result is 0.6 s away
            held.gate.set()
            answer = await agent.answer(request_id)
    assert answer["result"] == END_TURN
    updates = agent.updates(session_id)
    assert [u["sessionUpdate"] for u in updates] == [
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    call, done = updates[1], updates[2]
    assert call["toolCallId"] == done["toolCallId"]
    assert str(call["toolCallId"]).startswith("toolu_")
    assert call["title"] == "shell_exec" and call["kind"] == "execute"
    assert done["status"] == "completed"
