"""Any node serves any read: two real ``serve --store postgresql://…`` nodes on loopback.

Node n1 creates (and so owns) a tree and runs its turns; node n2 never owns it, yet
answers ``/history``, ``/subscribe`` (SSE), the WebSocket push and the tree stream for
it from the shared log, and a follower cut on n1 resumes on n2 with ``Last-Event-ID``: no gap, no
duplicate (the frames it got from n1 and then from n2 are exactly the run's frames).
Reading never moves the lease.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import trio_websocket
from pg_nodes import Cluster, Node
from web_client import Frame, SseStream

pytestmark = pytest.mark.pg

BUDGET = 60.0


async def start(*nodes: Node) -> None:
    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(trio.to_thread.run_sync, node.start)


@asynccontextmanager
async def two_nodes(
    cluster: Cluster,
) -> AsyncIterator[tuple[str, Node, Node, httpx.AsyncClient, httpx.AsyncClient, str]]:
    """Nodes n1 and n2 running, a token, a client of each, and a tree minted on n1."""
    token = cluster.token()
    n1, n2 = cluster.node("n1"), cluster.node("n2")
    await start(n1, n2)
    headers = {"x-token": token}
    async with (
        httpx.AsyncClient(base_url=n1.url, headers=headers, timeout=30) as one,
        httpx.AsyncClient(base_url=n2.url, headers=headers, timeout=30) as two,
    ):
        root = (await one.post("/api/web/sessions", json={})).json()["sessionId"]
        yield token, n1, n2, one, two, root


def payload(frames: list[Frame]) -> list[tuple[str, dict[str, object]]]:
    return [(str(f.id), f.data) for f in frames]


async def test_a_follower_cut_on_one_node_resumes_on_another_with_no_gap_and_no_duplicate(
    cluster: Cluster,
) -> None:
    with trio.fail_after(BUDGET):
        async with two_nodes(cluster) as (_token, _n1, _n2, one, two, root):
            body = {"sessionId": root, "message": "count to 10"}
            async with one.stream("POST", "/api/web/chat", json=body) as resp:
                assert resp.status_code == 200
                stream = SseStream(resp)
                first = await stream.take(1)
                assert first[0].type == "session"
                before_cut: list[Frame] = []
                while sum(f.type == "stream" for f in before_cut) < 4:
                    before_cut += await stream.take(1)
            # The follower was cut on n1 mid-run; it comes back on n2 with its last id.
            resume = {"last-event-id": str(before_cut[-1].id)}
            async with two.stream(
                "GET", "/api/web/subscribe", params={"sessionId": root}, headers=resume
            ) as resp:
                assert resp.status_code == 200, await resp.aread()
                after_cut = await SseStream(resp).take()
            assert after_cut[0].type == "session" and after_cut[0].id == before_cut[-1].id
            assert after_cut[-1].type == "complete"
            # The whole run, replayed on n2 from the id the chat began at.
            whole = {"last-event-id": str(first[0].id)}
            async with two.stream(
                "GET", "/api/web/subscribe", params={"sessionId": root}, headers=whole
            ) as resp:
                reference = await SseStream(resp).take()
    assert payload(before_cut + after_cut[1:]) == payload(reference[1:])
    text = "".join(str(f.data["text"]) for f in reference if f.type == "stream")
    assert [int(n) for n in text.split()] == list(range(1, 11))
    assert cluster.lease(root) == ("n1", 1)  # reading on n2 moved nothing


async def test_a_node_that_does_not_own_a_tree_answers_its_history_and_push_stream(
    cluster: Cluster,
) -> None:
    with trio.fail_after(BUDGET):
        async with two_nodes(cluster) as (token, _n1, n2, one, two, root):
            url = n2.url.replace("http://", "ws://") + f"/api/web/ws?token={token}&sessionId={root}"
            async with trio_websocket.open_websocket_url(url) as ws:
                opening = json.loads(await ws.get_message())
                assert opening["type"] == "session"
                body = {"sessionId": root, "message": "count to 6"}
                async with one.stream("POST", "/api/web/chat", json=body) as resp:
                    owner_frames = await SseStream(resp).take()
                pushed: list[dict[str, object]] = []
                while not (pushed and pushed[-1]["type"] == "complete"):
                    pushed.append(json.loads(await ws.get_message()))
            owner_text = "".join(str(f.data["text"]) for f in owner_frames if f.type == "stream")
            pushed_text = "".join(str(f["text"]) for f in pushed if f["type"] == "stream")
            assert pushed_text == owner_text and owner_text.split() == [str(i) for i in range(1, 7)]
            on_owner = (await one.get("/api/web/history", params={"sessionId": root})).json()
            elsewhere = (await two.get("/api/web/history", params={"sessionId": root})).json()
            idle = await two.get("/api/web/subscribe", params={"sessionId": root})
            missing = await two.get("/api/web/history", params={"sessionId": root + "x"})
            stored = await trio.to_thread.run_sync(cluster.records, root)
            async with two.stream("GET", "/api/web/tree", params={"sessionId": root}) as resp:
                assert resp.status_code == 200
                tree = await SseStream(resp).take(1 + len(stored))
    assert elsewhere == on_owner
    assert elsewhere["running"] is False and len(elsewhere["messages"]) == 2
    assert [f.split("\n")[0] for f in idle.text.strip().split("\n\n")][-1].startswith("id: ")
    assert '"type":"complete"' in idle.text.replace(" ", "")
    assert missing.status_code == 404
    assert tree[0].type == "tree"
    assert [(f.id.seq, f.data["event"]) for f in tree[1:]] == [(r.seq, r.event) for r in stored]
    assert cluster.lease(root) == ("n1", 1)


async def test_a_follower_of_a_node_killed_mid_run_resumes_on_another_node_through_the_takeover(
    cluster: Cluster,
) -> None:
    """The chaos rule, once: n1 (the owner) is SIGKILLed mid-run; its follower resumes on
    n2 with its last id, waits while the lease runs out, and sees n2's takeover close the
    cut turn: no gap, no duplicate against the run replayed whole afterwards."""
    with trio.fail_after(BUDGET):
        async with two_nodes(cluster) as (_token, n1, _n2, one, two, root):
            body = {"sessionId": root, "message": "count to 400"}
            before_kill: list[Frame] = []
            with pytest.raises(httpx.HTTPError):  # the node dies under the stream
                async with one.stream("POST", "/api/web/chat", json=body) as resp:
                    stream = SseStream(resp)
                    before_kill += await stream.take(1)
                    while sum(f.type == "stream" for f in before_kill) < 3:
                        before_kill += await stream.take(1)
                    n1.kill()
                    before_kill += await stream.take()
            resume = {"last-event-id": str(before_kill[-1].id)}
            async with two.stream(
                "GET", "/api/web/subscribe", params={"sessionId": root}, headers=resume
            ) as resp:
                assert resp.status_code == 200, await resp.aread()
                after_kill = await SseStream(resp).take()
            whole = {"last-event-id": str(before_kill[0].id)}
            async with two.stream(
                "GET", "/api/web/subscribe", params={"sessionId": root}, headers=whole
            ) as resp:
                reference = await SseStream(resp).take()
    assert after_kill[-1].type == "complete" and after_kill[-1].data.get("reason") == "restarted"
    assert payload(before_kill[1:] + after_kill[1:]) == payload(reference[1:])
    assert cluster.lease(root) == ("n2", 2)
