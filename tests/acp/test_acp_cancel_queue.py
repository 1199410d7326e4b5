"""The turn lifecycle, part one: cancel, a busy session (queued → follow + settle), chat failing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from urllib.parse import parse_qs, urlsplit

import trio
from acp_harness import AdapterProcess, Message, Rig
from sandbox_check import needs_sandbox
from web_client import sse, wait_until

CANCELLED = {"stopReason": "cancelled"}
SKEW_MARGIN_MS = 5 * 60 * 1000
"""How far before the turn's start the settle reads history (the spec's 5 minutes)."""


def _is_update(kind: str) -> Callable[[Message], bool]:
    def check(message: Message) -> bool:
        params = message.get("params")
        return isinstance(params, dict) and params["update"]["sessionUpdate"] == kind

    return check


async def _cancel(agent: AdapterProcess, session_id: str) -> None:
    await agent.notify("session/cancel", {"sessionId": session_id})


@needs_sandbox()
async def test_cancel_stops_the_turn_and_its_interrupted_tool_row_comes_before_cancelled(
    rig: Rig,
) -> None:
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "run sleep 30")
            await agent.wait_for(_is_update("tool_call"))
            await _cancel(agent, session_id)
            with trio.fail_after(5):
                answer = await agent.answer(request_id)
            sup = await rig.sup()
            await sup.wait_idle(session_id)
    assert answer["result"] == CANCELLED
    before = agent.updates(session_id, before=agent.position(request_id))
    assert before == agent.updates(session_id)  # nothing after the answer
    [done] = [u for u in before if u["sessionUpdate"] == "tool_call_update"]
    assert done["rawOutput"] == "[interrupted by user]"
    [stop] = rig.proxy.requests("/api/web/stop")
    assert json.loads(stop.body)["sessionId"] == session_id


async def test_a_cancel_before_the_session_frame_still_stops_the_turn_the_message_started(
    rig: Rig,
) -> None:
    held = rig.proxy.hold("/api/web/chat")
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "count to 40")
            await rig.proxy.wait_requests("/api/web/chat")
            await _cancel(agent, session_id)
            released = trio.current_time()
            held.gate.set()  # the message reaches the server only now
            with trio.fail_after(5):
                answer = await agent.answer(request_id)
            sup = await rig.sup()
            with trio.fail_after(3):  # stopped, not running its 10 s to the end
                await sup.wait_idle(session_id)
    assert answer["result"] == CANCELLED
    [stop] = rig.proxy.requests("/api/web/stop")
    assert stop.at > released
    assert len(sup.state(session_id).last_output.split()) < 40


async def test_a_cancel_whose_stream_never_completes_resolves_after_five_seconds(
    rig: Rig,
) -> None:
    rig.proxy.stall("/api/web/chat", after_frames=4)  # then silence: no `complete` comes
    with trio.fail_after(15):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            request_id = await agent.start_prompt(session_id, "count to 40")
            await rig.proxy.wait_cuts(1)
            cancelled_at = trio.current_time()
            await _cancel(agent, session_id)
            with trio.fail_after(8):
                answer = await agent.answer(request_id)
            waited = trio.current_time() - cancelled_at
            sup = await rig.sup()
            await sup.wait_idle(session_id)  # the stop still went through
    assert answer["result"] == CANCELLED
    assert waited >= 5.0  # it kept reading for the stop's frames as long as allowed
    assert len(rig.proxy.requests("/api/web/stop")) == 1


async def test_a_queued_prompt_follows_the_running_session_and_shows_only_its_own_reply(
    rig: Rig,
) -> None:
    token = rig.token()
    with trio.fail_after(15):
        async with rig.adapter(token=token) as agent:
            session_id = await agent.new_session()
            sup = await rig.sup()
            async with rig.harness.client(token) as other, trio.open_nursery() as nursery:
                body = {"message": "slow 10", "sessionId": session_id}
                nursery.start_soon(partial(sse, other, "POST", "/api/web/chat", json=body))
                await wait_until(lambda: sup.state(session_id).turn_open)
                before_ms = int(time.time() * 1000)
                answer = await agent.prompt(session_id, "hello there")
                after_ms = int(time.time() * 1000)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert agent.text(session_id) == "Done: hello there"
    [follow] = rig.proxy.requests("/api/web/subscribe")
    assert follow.headers["last-event-id"].isdigit()  # from the `queued` frame on
    [settle] = rig.proxy.requests("/api/web/history")
    [since] = parse_qs(urlsplit(settle.path).query)["since"]
    # The turn started between the two readings; the window opens 5 minutes before that.
    assert before_ms - SKEW_MARGIN_MS <= int(since) <= after_ms - SKEW_MARGIN_MS


async def test_a_queued_reply_the_follow_missed_is_settled_from_history(rig: Rig) -> None:
    rig.proxy.strip_last_event_id = True  # a server without resume
    held = rig.proxy.hold("/api/web/subscribe")
    token = rig.token()
    with trio.fail_after(15):
        async with rig.adapter(token=token) as agent:
            session_id = await agent.new_session()
            sup = await rig.sup()
            async with rig.harness.client(token) as other, trio.open_nursery() as nursery:
                body = {"message": "slow 6", "sessionId": session_id}
                nursery.start_soon(partial(sse, other, "POST", "/api/web/chat", json=body))
                await wait_until(lambda: sup.state(session_id).turn_open)
                request_id = await agent.start_prompt(session_id, "hello there")
                await rig.proxy.wait_requests("/api/web/subscribe")
                await sup.wait_idle(session_id)  # the queued reply is done before we attach
                held.gate.set()
                answer = await agent.answer(request_id)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert agent.text(session_id) == "Done: hello there"  # all of it from the settle


async def test_a_chat_that_fails_before_its_first_frame_says_so_and_ends_the_turn(
    rig: Rig,
) -> None:
    rig.proxy.refuse("/api/web/chat")
    with trio.fail_after(10):
        async with rig.adapter() as agent:
            session_id = await agent.new_session()
            answer = await agent.prompt(session_id, "hello")
            # the next prompt goes through
            again = await agent.prompt(session_id, "hello")
    assert answer["result"] == again["result"] == {"stopReason": "end_turn"}
    said = agent.text(session_id)
    assert said.startswith("[adapter error] cannot reach the server")
    assert said.endswith("Done: hello")
    assert rig.proxy.requests("/api/web/subscribe") == []  # nothing to re-attach to
