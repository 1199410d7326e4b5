"""Per-token limits, history pages, and revocation ending open streams (``docs/http.md``)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio_websocket
from web_client import Harness, SseStream, serve_harness, sse, wait_until

from halo_actors.fronts.http.app import FrontSettings
from halo_actors.fronts.http.limits import TokenLimits
from halo_actors.fronts.http.tokens import hash_token


def _ws_url(harness: Harness, query: str) -> str:
    return harness.url.replace("http://", "ws://") + "/api/web/ws?" + query


def _is_json_429(resp: httpx.Response, starts: str) -> None:
    assert resp.status_code == 429, (resp.status_code, resp.text)
    assert resp.headers["content-type"] == "application/json"
    assert int(resp.headers["retry-after"]) >= 1
    assert resp.json()["error"].startswith(starts), resp.json()


async def test_a_token_past_its_open_stream_limit_gets_a_json_429(tmp_path: Path) -> None:
    """Per-token limit on concurrent streams and WebSockets, answered 429 with a JSON error."""
    sid = "web_alice_busy"
    limits = TokenLimits(max_streams=2)
    with trio.fail_after(20):
        async with serve_harness(tmp_path, limits=limits) as harness:
            token, other = harness.token(), harness.token(account="bob")
            async with (
                harness.client(token) as client,
                harness.client(other) as bob,
                trio.open_nursery() as nursery,
            ):
                body = {"message": "slow 400", "sessionId": sid}
                nursery.start_soon(partial(sse, client, "POST", "/api/web/chat", json=body))
                front = harness.server.front
                await wait_until(lambda: front.open_streams == 1)
                url = _ws_url(harness, f"token={token}&sessionId={sid}")
                async with trio_websocket.open_websocket_url(url) as ws:
                    await ws.get_message()  # the session frame: two streams are open
                    refused_sse = await client.get("/api/web/subscribe", params={"sessionId": sid})
                    with pytest.raises(trio_websocket.ConnectionRejected) as refused_ws:
                        async with trio_websocket.open_websocket_url(url):
                            pass  # pragma: no cover
                    bobs = await sse(bob, "GET", "/api/web/subscribe")  # another token: fine
                nursery.cancel_scope.cancel()
    _is_json_429(refused_sse, "too many open streams for this token (at most 2)")
    rejected = refused_ws.value
    assert rejected.status_code == 429 and rejected.body is not None
    assert json.loads(rejected.body)["error"].startswith("too many open streams")
    assert bobs.types() == ["session", "complete"]


async def test_session_mints_and_chats_per_minute_are_limited_per_token(tmp_path: Path) -> None:
    """Per-token limits on session mints and chats per minute: 429 with a JSON error;
    a refused request changes nothing, and another token is not affected."""
    limits = TokenLimits(mints_per_minute=2, chats_per_minute=2)
    with trio.fail_after(20):
        async with serve_harness(tmp_path, limits=limits) as harness:
            token, other = harness.token(), harness.token(account="bob")
            async with harness.client(token) as client, harness.client(other) as bob:
                for _ in range(2):
                    assert (await client.post("/api/web/sessions")).status_code == 200
                    await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
                mint = await client.post("/api/web/sessions")
                chat = await client.post("/api/web/chat", json={"message": "one more"})
                sessions = (await client.get("/api/web/sessions")).json()["sessions"]
                assert (await bob.post("/api/web/sessions")).status_code == 200
    _is_json_429(mint, "too many session mints for this token (at most 2 per minute)")
    _is_json_429(chat, "too many chats for this token (at most 2 per minute)")
    assert len(sessions) == 2  # the two minted (the chats went to the newest); no more


async def _chat_rows(harness: Harness, client: httpx.AsyncClient, count: int) -> None:
    for i in range(count):
        await sse(client, "POST", "/api/web/chat", json={"message": f"hi {i}"})


async def _all_pages(client: httpx.AsyncClient, **params: str) -> list[list[dict[str, object]]]:
    pages: list[list[dict[str, object]]] = []
    before: object = None
    while True:
        query = dict(params) | ({"before": str(before)} if before is not None else {})
        body = (await client.get("/api/web/history", params=query)).json()
        pages.insert(0, body["messages"])
        before = body["nextBefore"]
        if before is None:
            return pages


async def test_history_is_paged_with_a_default_and_a_maximum_limit(tmp_path: Path) -> None:
    """``history`` is paged: ``limit`` with a default and a maximum; the newest rows
    first, ``nextBefore`` leads to the older ones, and the pages join to the whole."""
    limits = TokenLimits(history_limit=3, history_max_limit=5, history_max_bytes=1 << 20)
    with trio.fail_after(30):
        async with (
            serve_harness(tmp_path, limits=limits) as harness,
            harness.client(harness.token()) as client,
        ):
            await _chat_rows(harness, client, 4)  # 8 rows
            default = (await client.get("/api/web/history")).json()
            too_many = await client.get("/api/web/history", params={"limit": "6"})
            zero = await client.get("/api/web/history", params={"limit": "0"})
            pages = await _all_pages(client, limit="5")
            small = await _all_pages(client, limit="1")
    ids = [int(str(m["id"])) for page in pages for m in page]
    assert len(ids) == 8 and ids == sorted(ids)
    assert [len(p) for p in pages] == [3, 5]
    assert [m["id"] for p in small for m in p] == ids
    assert [m["id"] for m in default["messages"]] == ids[-3:]
    assert default["nextBefore"] == ids[-3]
    for resp in (too_many, zero):
        assert resp.status_code == 400 and resp.json() == {"error": "Invalid limit (1 to 5)"}


async def test_a_history_page_stops_at_its_byte_budget(tmp_path: Path) -> None:
    """No request may encode megabytes: a page also stops at ``history_max_bytes``
    (always one row at least), and the pages still join to the whole history."""
    limits = TokenLimits(history_max_bytes=300)
    with trio.fail_after(30):
        async with (
            serve_harness(tmp_path, limits=limits) as harness,
            harness.client(harness.token()) as client,
        ):
            for i in range(3):
                message = f"{i} " + "x" * 400
                await sse(client, "POST", "/api/web/chat", json={"message": message})
            pages = await _all_pages(client)
    rows = [m for page in pages for m in page]
    assert len(rows) == 6
    assert all(len(json.dumps(page)) < 300 for page in pages if len(page) > 1)
    assert [len(p) for p in pages if any("x" * 400 in str(m["text"]) for m in p)] == [1, 1, 1]


async def test_revoking_a_token_ends_its_open_sse_streams_and_websockets_within_one_second(
    tmp_path: Path,
) -> None:
    """Revoking a token ends its open SSE streams and WebSockets within 1 s, with the
    real reload interval (a revoked token's WebSocket used to receive forever)."""
    sid = "web_alice_long"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    reload_every = FrontSettings(tokens=None).token_reload  # type: ignore[arg-type]
    with trio.fail_after(30):
        async with serve_harness(tmp_path, token_reload=reload_every) as harness:
            token, kept = harness.token(), harness.token()
            ended: dict[str, float] = {}
            async with (
                harness.client(token) as client,
                harness.client(kept) as keeper,
                trio.open_nursery() as nursery,
            ):

                async def chat() -> None:
                    body = {"message": "slow 2000", "sessionId": sid}
                    await sse(client, "POST", "/api/web/chat", json=body)
                    ended["chat"] = trio.current_time()

                async def follow(who: httpx.AsyncClient, name: str) -> None:
                    params = {"sessionId": sid}
                    async with who.stream("GET", "/api/web/subscribe", params=params) as resp:
                        await SseStream(resp).take()
                    ended[name] = trio.current_time()

                nursery.start_soon(chat)
                front = harness.server.front
                await wait_until(lambda: front.open_streams == 1)
                # a follower that arrives before the run starts gets the idle answer and
                # ends at once: follow only the running session
                sup = await harness.sup()
                await wait_until(lambda: sup.is_running(sid))
                nursery.start_soon(follow, client, "subscribe")
                nursery.start_soon(follow, keeper, "kept")
                url = _ws_url(harness, f"token={token}&sessionId={sid}")
                async with trio_websocket.open_websocket_url(url) as ws:
                    await ws.get_message()
                    await wait_until(lambda: front.open_streams == 4)
                    await trio.to_thread.run_sync(harness.store.revoke, token)
                    revoked_at = trio.current_time()
                    with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                        while True:
                            await ws.get_message()
                    ended["ws"] = trio.current_time()
                await wait_until(lambda: {"chat", "subscribe"} <= ended.keys())
                assert front.quotas.open_streams(hash_token(kept)) == 1  # still streaming
                gone = (await client.get("/api/web/history")).status_code
                nursery.cancel_scope.cancel()
    reason = closed.value.reason
    assert reason is not None and reason.code == 1008
    assert gone == 401
    delays = {name: ended[name] - revoked_at for name in ("chat", "subscribe", "ws")}
    assert all(delay <= 1.0 for delay in delays.values()), delays
