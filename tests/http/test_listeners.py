"""No listener outlives its request: every exit path of chat, subscribe and the WebSocket."""

from __future__ import annotations

import trio
import trio_websocket
from web_client import Harness, SseRead, sse, subscriber_count, wait_until


async def _count(harness: Harness) -> int:
    return subscriber_count(await harness.sup())


async def test_normal_end_of_chat_and_subscribe_releases_the_listener(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "slow 2"})
            assert await _count(harness) == 0
            await sse(client, "GET", "/api/web/subscribe")
            assert await _count(harness) == 0


async def test_an_error_before_the_turn_releases_the_listener(harness: Harness) -> None:
    with trio.fail_after(10):
        sup = await harness.sup()
        await sup.create_session("web_alice_gone")
        await sup.archive("web_alice_gone")
        async with harness.client(harness.token()) as client:
            body = {"message": "hi", "sessionId": "web_alice_gone"}
            resp = await client.post("/api/web/chat", json=body)
            assert resp.status_code == 409
            assert await _count(harness) == 0
            body = {"message": "hi", "sessionId": "web_alice_new", "agentId": "nobody"}
            resp = await client.post("/api/web/chat", json=body)
            assert resp.status_code == 400
            assert await _count(harness) == 0


async def test_a_queued_answer_releases_its_listener(harness: Harness) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def first() -> None:
                reads.append(await sse(client, "POST", "/api/web/chat", json={"message": "slow 6"}))

            nursery.start_soon(first)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            assert await _count(harness) == 1
            queued = await sse(client, "POST", "/api/web/chat", json={"message": "later"})
            assert queued.types() == ["session", "queued"]
            assert await _count(harness) == 1  # only the first stream's listener is left
        assert await _count(harness) == 0


async def test_a_disconnect_releases_the_listener_of_chat_and_subscribe(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:
            body = {"message": "slow 30"}
            await sse(client, "POST", "/api/web/chat", json=body, stop_after=2)
            await harness.wait_listeners(0)
            await sse(client, "GET", "/api/web/subscribe", stop_after=2)
            await harness.wait_listeners(0)
            nursery.cancel_scope.cancel()


async def test_a_closed_websocket_releases_its_listener(harness: Harness) -> None:
    token = harness.token()
    url = harness.url.replace("http://", "ws://") + f"/api/web/ws?token={token}"
    with trio.fail_after(10):
        async with trio_websocket.open_websocket_url(url) as ws:
            await ws.get_message()
            assert await _count(harness) == 1
        await harness.wait_listeners(0)


async def test_shutdown_ends_open_streams_and_their_listeners(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            async with client.stream("POST", "/api/web/chat", json={"message": "slow 100"}) as r:
                lines = r.aiter_lines()
                assert await lines.__anext__() == "retry: 1000"
                assert await lines.__anext__() == ""
                assert (await lines.__anext__()).startswith("id: ")
                harness.server.front.draining.set()
                rest = [line async for line in lines]
            assert '"complete"' not in "".join(rest)
            await harness.wait_listeners(0)
