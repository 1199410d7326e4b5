"""/api/web/ws: the WebSocket push channel (trio-websocket as the client)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio_websocket
from web_client import Harness, sse, wait_until

from halo_actors.fronts.http.errors import MISSING_TOKEN


def _ws_url(harness: Harness, query: str) -> str:
    return harness.url.replace("http://", "ws://") + "/api/web/ws?" + query


async def _collect(
    ws: trio_websocket.WebSocketConnection, until_completes: int
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while sum(1 for m in got if m["type"] == "complete") < until_completes:
        got.append(json.loads(await ws.get_message()))
    return got


async def test_push_carries_every_frame_and_complete_keeps_its_batch_boundary(
    harness: Harness,
) -> None:
    token = harness.token()
    sid = "web_alice_push"
    with trio.fail_after(15):
        async with (
            trio_websocket.open_websocket_url(
                _ws_url(harness, f"token={token}&sessionId={sid}")
            ) as ws,
            harness.client(token) as client,
            trio.open_nursery() as nursery,
        ):
            hello = json.loads(await ws.get_message())
            assert hello["type"] == "session" and hello["sessionId"] == sid
            nursery.start_soon(
                lambda: sse(
                    client, "POST", "/api/web/chat", json={"message": "slow 6", "sessionId": sid}
                )
            )
            sup = await harness.sup()
            await wait_until(lambda: sup.exists(sid) and sup.state(sid).turn_open)
            await sup.send(sid, "queued while busy")
            frames = await _collect(ws, until_completes=2)
    completes = [f for f in frames if f["type"] == "complete"]
    assert [c["batchBoundary"] for c in completes] == [True, False]
    assert [f["text"] for f in frames if f["type"] == "user"] == ["slow 6", "queued while busy"]
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(seqs)
    assert {f["type"] for f in frames} <= {"user", "stream", "complete"}


async def test_push_resumes_after_last_event_id(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with harness.client(token) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "slow 3"})
        sid = full.frames[0].data["sessionId"]
        after = full.frames[1].id
        url = _ws_url(harness, f"token={token}&sessionId={sid}&lastEventId={after}")
        async with trio_websocket.open_websocket_url(url) as ws:
            json.loads(await ws.get_message())
            frames = await _collect(ws, until_completes=1)
    assert [f["seq"] for f in frames] == [f.id.seq for f in full.frames[2:]]
    end = {"type": "complete", "batchBoundary": False, "reason": "end_turn"}
    assert frames[-1] == end | {"seq": full.frames[-1].id.seq}


@pytest.mark.parametrize(
    ("query", "status", "body"),
    [
        ("", 401, {"error": MISSING_TOKEN}),
        ("sessionId=web_bob_1", 403, {"error": "session not owned by this token"}),
        ("sessionId=../x", 400, None),
        ("lastEventId=x", 400, {"error": "Invalid lastEventId"}),
    ],
)
async def test_push_refuses_the_handshake_like_http(
    harness: Harness, query: str, status: int, body: dict[str, str] | None
) -> None:
    token = harness.token()
    prefix = f"token={token}&" if status != 401 else ""
    with trio.fail_after(10):
        with pytest.raises(trio_websocket.ConnectionRejected) as refused:
            async with trio_websocket.open_websocket_url(_ws_url(harness, prefix + query)):
                pass
    assert refused.value.status_code == status
    if body is not None:
        assert json.loads(refused.value.body or b"") == body


async def test_push_closes_with_going_away_when_the_server_drains(harness: Harness) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with trio_websocket.open_websocket_url(_ws_url(harness, f"token={token}")) as ws:
            await ws.get_message()
            harness.server.front.draining.set()
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code in (1001, 1006)


async def test_push_resumes_inside_an_event_shown_as_several_frames(
    harness: Harness,
) -> None:
    token = harness.token()
    with trio.fail_after(10):
        async with harness.client(token) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "media"})
        sid = full.frames[0].data["sessionId"]
        (inside,) = [i for i, f in enumerate(full.frames) if f.id.part]
        url = _ws_url(
            harness, f"token={token}&sessionId={sid}&lastEventId={full.frames[inside].id}"
        )
        async with trio_websocket.open_websocket_url(url) as ws:
            json.loads(await ws.get_message())
            frames = await _collect(ws, until_completes=1)
    shown = [f for f in frames if f["type"] != "complete"]
    expected = [f for f in full.frames[inside + 1 :] if f.type != "complete"]
    assert [f.pop("seq") for f in shown] == [f.id.seq for f in expected]
    assert shown == [f.data for f in expected]  # no ``part``: each is its event's last frame
