"""POST /api/web/chat: the SSE stream of one run, queued, disconnect, stop, MEDIA lines."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import pytest
import trio
from sandbox_check import needs_sandbox
from web_client import Harness, SseRead, sse, wait_until

from halo_actors.core.events import CLIENT_KINDS, FRAME_ONLY_KINDS
from halo_actors.core.log import sqlite as sqlite_log
from halo_actors.fronts.http.frames import Frame
from halo_actors.fronts.http.streams import ChatPlan, RunPlan

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


async def test_chat_streams_session_first_then_the_run_to_its_terminal_complete(
    harness: Harness,
) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            read = await sse(client, "POST", "/api/web/chat", json={"message": "slow 3"})
    assert read.types()[0] == "session"
    assert read.frames[1].data == {"type": "user", "text": "slow 3"}
    assert read.frames[-1].data == {"type": "complete", "reason": "end_turn"}
    assert read.text() == "1\n2\n3\n"
    ids = [f.id for f in read.frames]
    assert ids == sorted(ids) and ids[0] < ids[1]
    assert all(f.type in CLIENT_KINDS | FRAME_ONLY_KINDS for f in read.frames)


@needs_sandbox()
async def test_thinking_and_tool_frames_have_the_documented_shape(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            thought = await sse(client, "POST", "/api/web/chat", json={"message": "think"})
            tool = await sse(client, "POST", "/api/web/chat", json={"message": "bigtool"})
    assert {"type": "thinking", "text": "hmm"} in [f.data for f in thought.frames]
    call = next(f.data for f in tool.frames if f.type == "tool_call")
    assert set(call) == {"type", "toolName", "toolUseId", "toolInput"}
    assert call["toolName"] == "shell_exec" and call["toolInput"] == {"command": "seq 1 400"}
    result = next(f.data for f in tool.frames if f.type == "tool_result")
    assert set(result) == {"type", "toolName", "toolUseId", "result"}
    assert result["toolUseId"] == call["toolUseId"]
    assert isinstance(result["result"], str) and len(result["result"]) == 500


async def test_a_busy_session_answers_queued_and_the_queued_message_runs_after(
    harness: Harness,
) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def first() -> None:
                reads.append(await sse(client, "POST", "/api/web/chat", json={"message": "slow 6"}))

            nursery.start_soon(first)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            queued = await sse(client, "POST", "/api/web/chat", json={"message": "again"})
    assert queued.types() == ["session", "queued"]
    # Rule: every frame id names exactly what came before it. `queued` showed nothing
    # past the stream's cursor (the running turn's records, the message's own), so a
    # client resuming from it must get them: its id is the cursor, not the log's head.
    assert queued.frames[1].id == queued.frames[0].id
    # the first stream absorbed the batch boundary and carried the drained round too
    assert reads[0].types().count("complete") == 1
    assert [f.data["text"] for f in reads[0].frames if f.type == "user"] == ["slow 6", "again"]


async def test_a_client_disconnect_ends_its_stream_but_not_the_turn(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            body = {"message": "slow 20"}
            first = await sse(client, "POST", "/api/web/chat", json=body, stop_after=3)
            session_id = str(first.frames[0].data["sessionId"])
            await harness.wait_listeners(0)
            sup = await harness.sup()
            assert sup.is_running(session_id)
            await sup.wait_idle(session_id)
    assert sup.state(session_id).last_output == "".join(f"{i}\n" for i in range(1, 21))


async def test_stop_answers_after_the_turn_has_stopped(harness: Harness) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def chat() -> None:
                reads.append(
                    await sse(client, "POST", "/api/web/chat", json={"message": "slow 50"})
                )

            nursery.start_soon(chat)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            (session,) = [s.session_id for s in sup.sessions()]
            resp = await client.post("/api/web/stop", json={})
            assert resp.json() == {"stopped": True}
            assert not sup.is_running(session) and not sup.state(session).turn_open
            again = await client.post("/api/web/stop")
            assert again.json() == {"stopped": False}
    assert reads[0].types()[-1] == "complete"


async def test_media_lines_become_file_frames_even_split_across_deltas(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            read = await sse(client, "POST", "/api/web/chat", json={"message": "media"})
    assert read.text() == "Here it is:\nDone.\n"
    files = [f.data for f in read.frames if f.type == "file"]
    assert files == [
        {"type": "file", "path": "out/report.txt", "url": "/api/web/file?path=out/report.txt"}
    ]
    sup = await harness.sup()
    (state,) = sup.sessions()
    assert "MEDIA: out/report.txt" in state.last_output  # the log keeps the line


@needs_sandbox()
async def test_keepalive_comments_flow_while_the_stream_is_idle(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            read = await sse(client, "POST", "/api/web/chat", json={"message": "run sleep 1"})
    assert ": keepalive" in read.comments
    assert read.types()[-1] == "complete"


async def test_unknown_agent_and_archived_session_fail_before_the_stream(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            body = {"message": "hi", "sessionId": "web_alice_x1", "agentId": "nobody"}
            resp = await client.post("/api/web/chat", json=body)
            assert resp.status_code == 400
            assert "unknown agent profile" in resp.json()["error"]
            sup = await harness.sup()
            await sup.create_session("web_alice_x2")
            await sup.archive("web_alice_x2")
            body = {"message": "hi", "sessionId": "web_alice_x2"}
            resp = await client.post("/api/web/chat", json=body)
            assert resp.status_code == 409
            assert resp.headers["content-type"] == "application/json"


def add_profile(harness: Harness, name: str) -> None:
    """A second agent profile in the workspace (read when its runtime opens: call first)."""
    agents = harness.workspace / ".halo" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.toml").write_text(f'description = "the {name} profile"\n')


async def test_agent_id_sets_the_profile_of_a_new_session_and_is_ignored_afterwards(
    harness: Harness,
) -> None:
    add_profile(harness, "helper")
    sid = "web_alice_helped"
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            body = {"message": "hi", "sessionId": sid, "agentId": "helper"}
            first = await sse(client, "POST", "/api/web/chat", json=body)
            sup = await harness.sup()
            assert sup.state(sid).agent_id == "helper"
            later = []
            for agent in ("default", "nobody"):  # a known other profile, then an unknown one
                body = {"message": f"as {agent}", "sessionId": sid, "agentId": agent}
                later.append(await sse(client, "POST", "/api/web/chat", json=body))
    assert first.types()[-1] == "complete"
    assert [read.types()[-1] for read in later] == ["complete", "complete"]
    assert sup.state(sid).agent_id == "helper"
    assert sup.state(sid).messages[-1].text() == "Done: as nobody"


async def test_an_owned_unknown_session_id_is_created_by_its_first_chat(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            body = {"message": "hello", "sessionId": "web_alice_premint"}
            read = await sse(client, "POST", "/api/web/chat", json=body)
    assert read.frames[0].data == {"type": "session", "sessionId": "web_alice_premint"}
    assert (await harness.sup()).exists("web_alice_premint")


async def test_every_frame_a_chat_streams_matches_the_documented_frame_schema(
    harness: Harness,
) -> None:
    """Rule: the OpenAPI document describes every SSE frame, a complete's reason included
    (the full hostile-HTTP suite found `complete` frames with `reason` it rejected)."""
    jsonschema = pytest.importorskip("jsonschema")
    doc = json.loads(OPENAPI.read_text())
    frame_schema = {"$ref": "#/components/schemas/Frame", "components": doc["components"]}
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            reads = [
                await sse(client, "POST", "/api/web/chat", json={"message": message})
                for message in ("slow 3", "think", "bigtool")
            ]
    frames = [f.data for read in reads for f in read.frames]
    assert {"type": "complete", "reason": "end_turn"} in frames
    for frame in frames:
        jsonschema.validate(frame, frame_schema)


async def test_a_chat_that_starts_a_run_streams_that_run_not_the_end_of_the_one_before(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: a chat that starts a run streams that run, to its own terminal ``complete``.
    The run before may have ended in the session's state while its closing records are
    not durable yet (pipelined appends); they are published after the chat's listener
    registered, and their ``complete`` must not end the new run's stream. So the stream
    starts right before the message's own record, and its ``session`` frame says so.
    (With no journal, as when it is being cut: the run's end then waits for the writer
    thread's commit, the window this rule is about.)"""
    monkeypatch.setattr(sqlite_log, "JOURNAL_CUT_BYTES", 0)
    with trio.fail_after(10):
        sup = await harness.sup()
        sid = await sup.create_session()
        await sup.send(sid, "slow 2")
        actor = sup.actor(sid)
        while actor.running:  # the run's end is stamped in the step that ends it
            await trio.lowlevel.checkpoint()
        assert sup.log.last_seq < actor.state.last_seq  # its closing records: not durable yet
        ended = actor.state.last_seq
        frames = await every_frame(ChatPlan(sup, sid, "slow 3", (), None, 100, "workspace"))
    assert [f.payload["type"] for f in frames][:2] == ["session", "user"]
    assert frames[1].payload["text"] == "slow 3"
    assert "".join(str(f.payload["text"]) for f in frames if f.payload["type"] == "stream") == (
        "1\n2\n3\n"
    )
    assert frames[-1].payload == {"type": "complete", "reason": "end_turn"}
    # the session frame's id covers the run before (not shown here), never this run's records
    assert ended <= frames[0].seq < frames[1].seq


async def every_frame(plan: ChatPlan | RunPlan) -> list[Frame]:
    """Every frame of ``plan``'s stream, from its opening to its end."""
    send, receive = trio.open_memory_channel[Frame](100)
    async with AsyncExitStack() as stack:
        first = await plan.open(stack)
        async with send:
            await plan.pump(send)
    return [*first, *[frame async for frame in receive]]


async def test_a_compaction_a_command_starts_streams_that_run_not_the_end_of_the_one_before(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: the stream of a run a command starts (``/compact``) begins at the session's
    last record when the run was claimed: the run before, ended in the state but not
    durable yet (no journal, as above), does not end it with its own ``complete``."""
    monkeypatch.setattr(sqlite_log, "JOURNAL_CUT_BYTES", 0)
    with trio.fail_after(10):
        sup = await harness.sup()
        sid = await sup.create_session()
        await sup.send(sid, "slow 2")
        actor = sup.actor(sid)
        while actor.running:
            await trio.lowlevel.checkpoint()
        assert sup.log.last_seq < actor.state.last_seq
        ended = actor.state.last_seq
        frames = await every_frame(RunPlan(sup, sid, partial(sup.compact, sid), 100))
    assert frames[0].payload["type"] == "session" and frames[0].seq == ended
    assert all(f.seq > ended for f in frames[1:])
    assert frames[-1].payload["type"] == "complete"
