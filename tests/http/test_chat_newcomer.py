"""What a person new to the chat meets: /help, switching to a new id, why a turn ended,
an unknown agent profile, a session's title."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio_websocket
from web_client import TEST_SCRIPT, Harness, SseRead, serve_harness, sse, wait_until

from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.fronts.http.commands import HELP

BUDGET = 10.0
SCRIPT = Script(
    rules=(Rule(match="^break$", steps=(Step(text="oh", fail="boom"),)), *TEST_SCRIPT.rules)
)


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve_harness(tmp_path, model=ScriptedModel({}, fallback=SCRIPT)) as harness:
        yield harness


async def say(harness: Harness, message: str, **body: str) -> SseRead:
    async with harness.client(harness.token()) as client:
        return await sse(client, "POST", "/api/web/chat", json={"message": message, **body})


async def test_help_lists_the_slash_commands_and_sends_nothing_to_the_agent(
    chat: Harness,
) -> None:
    """Rule: `/help` lists the slash commands (it never goes to the model)."""
    with trio.fail_after(BUDGET):
        read = await say(chat, "/help")
    assert read.types() == ["session", "stream", "complete"]
    assert read.text() == HELP
    for command in ("/session new", "/session switch <id>", "/compact", "/tree", "/help"):
        assert command in HELP
    assert (await chat.sup()).sessions() == []  # no session was created, no model called


async def test_switching_to_an_unknown_session_says_it_starts_a_new_one(chat: Harness) -> None:
    """Rule: `/session switch <unknown>` says that it starts a new session."""
    with trio.fail_after(BUDGET):
        await say(chat, "hello")
        (existing,) = [s.session_id for s in (await chat.sup()).sessions()]
        known = await say(chat, f"/session switch {existing}")
        fresh = "web_alice_brand-new"
        unknown = await say(chat, f"/session switch {fresh}")
        first = await say(chat, "hi there")
    assert known.types() == ["session", "switch", "complete"]
    assert unknown.types() == ["session", "switch", "stream", "complete"]
    assert unknown.text() == f"session {fresh} does not exist yet: your next message starts it\n"
    assert first.frames[0].data == {"type": "session", "sessionId": fresh}


async def test_the_complete_frame_says_why_the_turn_ended(chat: Harness) -> None:
    """Rule: the `complete` frame says why a turn ended (end_turn, error, stopped)."""
    with trio.fail_after(BUDGET):
        done = await say(chat, "slow 2")
        failed = await say(chat, "break")
        reads: list[SseRead] = []
        async with chat.client(chat.token()) as client, trio.open_nursery() as nursery:

            async def long_turn() -> None:
                reads.append(
                    await sse(client, "POST", "/api/web/chat", json={"message": "slow 200"})
                )

            nursery.start_soon(long_turn)
            sup = await chat.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            assert (await client.post("/api/web/stop", json={})).json() == {"stopped": True}
    assert done.frames[-1].data == {"type": "complete", "reason": "end_turn"}
    assert failed.frames[-1].data == {"type": "complete", "reason": "error"}
    assert reads[0].frames[-1].data == {"type": "complete", "reason": "stopped"}


async def test_a_hard_interrupt_shows_as_interrupted_on_the_push_channel(chat: Harness) -> None:
    """Rule: a turn cut by a hard interrupt ends with reason `interrupted` (on SSE that
    complete is a batch boundary, absorbed; the push channel shows every complete)."""
    sid = "web_alice_cut"
    url = chat.url.replace("http://", "ws://") + f"/api/web/ws?token={chat.token()}&sessionId={sid}"
    with trio.fail_after(BUDGET):
        sup = await chat.sup()
        await sup.create_session(sid, namespace="web_alice")
        async with trio_websocket.open_websocket_url(url) as ws:
            json.loads(await ws.get_message())  # the session frame
            await sup.send(sid, "slow 200")
            await wait_until(lambda: sup.state(sid).turn_open)
            await sup.interrupt(sid, "slow 1")
            completes: list[dict[str, object]] = []
            while len(completes) < 2:
                frame = json.loads(await ws.get_message())
                if frame["type"] == "complete":
                    completes.append(frame)
    assert [(c["batchBoundary"], c["reason"]) for c in completes] == [
        (True, "interrupted"),
        (False, "end_turn"),
    ]


async def test_an_unknown_agent_profile_lists_the_valid_ones(chat: Harness) -> None:
    """Rule: an unknown agent profile lists the valid ones."""
    with trio.fail_after(BUDGET):
        async with chat.client(chat.token()) as client:
            resp = await client.post("/api/web/chat", json={"message": "hi", "agentId": "helpr"})
    assert resp.status_code == 400
    assert resp.json() == {"error": "unknown agent profile 'helpr'; known: default"}


async def test_a_session_gets_its_title_from_its_first_message(chat: Harness) -> None:
    """Rule: sessions get a title from their first message."""
    first = "  Plan the release\nof version 2, with notes  "
    with trio.fail_after(BUDGET):
        await say(chat, first)
        await say(chat, "and a second message")
        async with chat.client(chat.token()) as client:
            listed = (await client.get("/api/web/sessions")).json()["sessions"]
    assert [row["title"] for row in listed] == ["Plan the release"]
