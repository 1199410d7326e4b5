"""GET /api/web/tree (SSE) and its WebSocket: every record of a whole session tree.

The records are compared with the log itself: the stream must carry exactly the
tree's records (every session of it, no other tree's), in seq order, resumable from
any id with no gap and no duplicate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio_websocket
from web_client import Harness, SseStream, serve_harness, sse, wait_until

from halo_actors.core.events import TextStreamed
from halo_actors.core.log import EventFilter
from halo_actors.runtime.supervisor import Supervisor


async def _tree_seqs(sup: Supervisor, root: str) -> list[int]:
    return [r.seq for r in await sup.log.read(EventFilter(tree=root))]


async def _spawned_tree(harness: Harness, client: httpx.AsyncClient) -> tuple[str, Supervisor]:
    """A root that started two sub-sessions, all of them idle again."""
    body = {"message": "spawn 2 look around", "sessionId": "web_alice_tree"}
    chat = await sse(client, "POST", "/api/web/chat", json=body)
    root = str(chat.frames[0].data["sessionId"])
    sup = await harness.sup()
    await sup.wait_idle(root)
    return root, sup


def _url(harness: Harness, query: str) -> str:
    return harness.url.replace("http://", "ws://") + "/api/web/tree?" + query


async def test_the_tree_stream_carries_every_record_of_the_whole_tree_and_no_other(
    harness: Harness,
) -> None:
    """Rule: "A tree stream: every event of a root session's whole tree"."""
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            other = await sse(
                client, "POST", "/api/web/chat", json={"message": "hi", "sessionId": "web_alice_b"}
            )
            root, sup = await _spawned_tree(harness, client)
            expected = await _tree_seqs(sup, root)
            child = sup.children(root)[0]
            async with client.stream(
                "GET", "/api/web/tree", params={"sessionId": child}
            ) as resp:  # any session of the tree names it
                assert resp.status_code == 200
                reader = SseStream(resp)
                frames = await reader.take(len(expected) + 1)
    opening, *records = frames
    assert opening.data == {"type": "tree", "sessionId": root, "cursor": 0}
    assert [f.data["seq"] for f in records] == expected
    assert [f.id.seq for f in records] == expected
    assert {str(f.data["sessionId"]) for f in records} == {root, *sup.children(root)}
    kinds = {str(f.data["event"]["type"]) for f in records}  # type: ignore[index]
    assert {"session_created", "message_queued", "report_sent", "stream", "tool_call"} <= kinds
    assert other.frames[0].data["sessionId"] not in {f.data["sessionId"] for f in records}


async def test_the_tree_stream_resumes_after_any_id_with_no_gap_and_no_duplicate(
    harness: Harness,
) -> None:
    """Rule: resumable with ``Last-Event-ID`` (header or query), as ``/subscribe``."""
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            root, sup = await _spawned_tree(harness, client)
            expected = await _tree_seqs(sup, root)
            for cut in (expected[0], expected[len(expected) // 2], expected[-2]):
                for how in ("header", "query"):
                    params = {"sessionId": root}
                    headers = {}
                    if how == "header":
                        headers["last-event-id"] = str(cut)
                    else:
                        params["lastEventId"] = str(cut)
                    async with client.stream(
                        "GET", "/api/web/tree", params=params, headers=headers
                    ) as resp:
                        rest = [s for s in expected if s > cut]
                        opening, *frames = await SseStream(resp).take(len(rest) + 1)
                    assert opening.data["cursor"] == cut and opening.id.seq == cut
                    assert [f.id.seq for f in frames] == rest


async def test_the_tree_stream_follows_the_live_tail_and_sends_retry_and_keepalives(
    harness: Harness,
) -> None:
    """Rules: SSE streams send ``retry:`` (about 1 s); ``: keepalive`` while idle."""
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            root, sup = await _spawned_tree(harness, client)
            known = await _tree_seqs(sup, root)
            async with client.stream(
                "GET", "/api/web/tree", params={"sessionId": root, "lastEventId": known[-1]}
            ) as resp:
                lines = resp.aiter_lines()
                assert await lines.__anext__() == "retry: 1000"
                reader = SseStream(resp)
                reader._lines = lines  # the same body, read on from here
                await reader.take(1)  # the opening frame
                await sup.send(root, "again")
                await sup.wait_idle(root)
                live = await _tree_seqs(sup, root)
                got = await reader.take(len(live) - len(known))
                async for line in lines:  # idle now: keepalives (every 0.3 s here)
                    if line.startswith(":"):
                        assert line == ": keepalive"
                        break
    assert [f.id.seq for f in got] == live[len(known) :]


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({}, 400, "sessionId is required: the tree of which session?"),
        ({"sessionId": "web_bob_1"}, 403, "session not owned by this token"),
        ({"sessionId": "../x"}, 400, None),
        ({"sessionId": "web_alice_nothing"}, 404, "session not found"),
        ({"sessionId": "web_alice_nothing", "lastEventId": "1.2"}, 400, "Invalid lastEventId"),
    ],
)
async def test_the_tree_stream_follows_the_ownership_rules(
    harness: Harness, params: dict[str, str], status: int, error: str | None
) -> None:
    """Rule: "the same ownership rules" as ``/subscribe``; refusals come before the stream."""
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            resp = await client.get("/api/web/tree", params=params)
            missing = await httpx.AsyncClient(base_url=harness.url).get(
                "/api/web/tree", params={"sessionId": "web_alice_1"}
            )
    assert resp.status_code == status and resp.headers["content-type"] == "application/json"
    if error is not None:
        assert resp.json() == {"error": error}
    assert missing.status_code == 401


async def test_a_readonly_token_may_watch_its_own_tree(harness: Harness) -> None:
    writer, reader = harness.token(account="alice"), harness.token("readonly", account="alice")
    with trio.fail_after(10):
        async with harness.client(writer) as client:
            root, _ = await _spawned_tree(harness, client)
        async with (
            harness.client(reader) as client,
            client.stream("GET", "/api/web/tree", params={"sessionId": root}) as resp,
        ):
            (opening,) = await SseStream(resp).take(1)
    assert resp.status_code == 200 and opening.data["sessionId"] == root


async def test_a_slow_tree_watcher_is_closed_and_resumes_missing_nothing(tmp_path: Path) -> None:
    """Rule: slow-client close: an overflowing listener ends the stream; events are never
    skipped (the client resumes from its last id)."""
    with trio.fail_after(20):
        async with (
            serve_harness(tmp_path, subscriber_buffer=4) as harness,
            harness.client(harness.token()) as client,
        ):
            chat = await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            root = str(chat.frames[0].data["sessionId"])
            sup = await harness.sup()
            await sup.wait_idle(root)
            async with client.stream("GET", "/api/web/tree", params={"sessionId": root}) as resp:
                reader = SseStream(resp)
                await reader.take(len(await _tree_seqs(sup, root)) + 1)  # caught up
                await sup.actor(root).emit(*[TextStreamed(text=f"b{i}") for i in range(40)])
                cut = await reader.take()  # returns when the server ends the stream
            assert len(cut) < 40
            last = reader.read.frames[-1].id.seq
            expected = await _tree_seqs(sup, root)
            async with client.stream(
                "GET", "/api/web/tree", params={"sessionId": root, "lastEventId": str(last)}
            ) as resp:
                rest = [s for s in expected if s > last]
                _, *frames = await SseStream(resp).take(len(rest) + 1)
    seen = [f.id.seq for f in reader.read.frames[1:]] + [f.id.seq for f in frames]
    assert seen == expected


async def test_the_tree_websocket_carries_the_same_records_and_resumes(harness: Harness) -> None:
    """Rule: the tree stream is also on the WebSocket, with the same resume and rules."""
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            root, sup = await _spawned_tree(harness, client)
        expected = await _tree_seqs(sup, root)
        got: list[dict[str, Any]] = []
        async with trio_websocket.open_websocket_url(
            _url(harness, f"token={token}&sessionId={root}")
        ) as ws:
            opening = json.loads(await ws.get_message())
            while len(got) < len(expected):
                got.append(json.loads(await ws.get_message()))
        middle = expected[len(expected) // 2]
        async with trio_websocket.open_websocket_url(
            _url(harness, f"token={token}&sessionId={root}&lastEventId={middle}")
        ) as ws:
            resumed_opening = json.loads(await ws.get_message())
            resumed = [json.loads(await ws.get_message()) for s in expected if s > middle]
        with pytest.raises(trio_websocket.ConnectionRejected) as refused:
            async with trio_websocket.open_websocket_url(
                _url(harness, f"token={token}&sessionId=web_bob_1")
            ):
                pass
    assert opening == {"type": "tree", "sessionId": root, "cursor": 0}
    assert [r["seq"] for r in got] == expected
    assert resumed_opening["cursor"] == middle
    assert [r["seq"] for r in resumed] == [s for s in expected if s > middle]
    assert refused.value.status_code == 403


async def test_tree_streams_end_when_the_server_drains(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with harness.client(token) as client:
            root, _ = await _spawned_tree(harness, client)
            async with client.stream("GET", "/api/web/tree", params={"sessionId": root}) as resp:
                reader = SseStream(resp)
                await reader.take(1)
                harness.server.front.draining.set()
                await reader.take()  # the body ends
        front = harness.server.front
        await wait_until(lambda: front.open_streams == 0)


async def test_revoking_the_token_ends_its_tree_streams(harness: Harness) -> None:
    """The tree stream is a stream like the others: a revoked token's ends (SSE) or is
    closed with 1008 (WebSocket)."""
    token = harness.token()
    with trio.fail_after(20):
        async with harness.client(token) as client:
            root, _ = await _spawned_tree(harness, client)
            async with (
                client.stream("GET", "/api/web/tree", params={"sessionId": root}) as resp,
                trio_websocket.open_websocket_url(
                    _url(harness, f"token={token}&sessionId={root}")
                ) as ws,
            ):
                reader = SseStream(resp)
                await reader.take(1)
                await ws.get_message()
                harness.store.revoke(token)
                await reader.take()  # the body ends
                with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                    while True:
                        await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1008
