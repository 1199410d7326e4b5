"""Messages for a tree another node owns: forwarded through the database, acknowledged
only once the owner has logged them.

Two real ``serve --store`` nodes on loopback. Node a owns the tree; a chat sent to node
b is stored as an inbox row, delivered by a (its record carries the row id, under a's
epoch; the lease never moves), and b answers only then: the run it started streamed
from b's copy of the shared log, or ``queued`` behind a's running turn. A refusal by
the owner reaches the sender as the owner's error. With no owner left, the node that
receives a message takes the tree.
"""

from __future__ import annotations

import httpx
import psycopg
import pytest
import trio
from pg_nodes import Cluster, Node
from psycopg import sql
from test_serve_postgres import answered, until_records
from web_client import EventId, Frame, SseStream

pytestmark = pytest.mark.pg

BUDGET = 60.0


async def chat(node: Node, token: str, session_id: str, text: str) -> list[Frame]:
    async with (
        httpx.AsyncClient(base_url=node.url, headers={"x-token": token}, timeout=30) as client,
        client.stream(
            "POST", "/api/web/chat", json={"sessionId": session_id, "message": text}
        ) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        return await SseStream(resp).take()


def inbox_rows(cluster: Cluster) -> list[tuple[int, str, int | None, bool | None, str | None]]:
    query = sql.SQL("SELECT id, session_id, seq, started, error FROM {} ORDER BY id").format(
        sql.Identifier(cluster.log_schema, "inbox")
    )
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        return conn.execute(query).fetchall()


async def test_a_message_sent_to_another_node_is_logged_by_the_owner_before_it_is_acknowledged(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        for node in (a, b):
            await trio.to_thread.run_sync(node.start)
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
        frames = await chat(b, token, root, "hello from b")
        assert frames[-1].type == "complete", "b streamed the run a started"
        assert "hello from b" in "".join(str(f.data.get("text", "")) for f in frames)
        records = await trio.to_thread.run_sync(cluster.records, root)
        assert cluster.lease(root) == ("a", 1), "forwarding never moves the lease"
    (queued,) = [r for r in records if r.kind == "message_queued"]
    rows = inbox_rows(cluster)
    assert rows == [(queued.event["inboxId"], root, queued.seq, True, None)]
    assert queued.epoch == 1
    assert [f.type for f in frames][:1] == ["session"]
    assert frames[0].id == EventId(queued.seq - 1), "b's stream starts right before the message"


async def test_a_message_forwarded_to_a_busy_tree_is_queued_then_answered(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        for node in (a, b):
            await trio.to_thread.run_sync(node.start)
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
            async with client.stream(
                "POST", "/api/web/chat", json={"sessionId": root, "message": "count to 12"}
            ) as resp:
                stream = SseStream(resp)
                while not any(f.type == "stream" for f in await stream.take(1)):
                    pass
                frames = await chat(b, token, root, "queued via b")
                assert [f.type for f in frames] == ["session", "queued"]
                await stream.take()
        await until_records(cluster, root, answered("queued via b"))
    assert [row[3] for row in inbox_rows(cluster)] == [False]


async def test_the_owners_refusal_reaches_the_sender(cluster: Cluster) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        for node in (a, b):
            await trio.to_thread.run_sync(node.start)
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
            assert (await client.post("/api/web/archive", json={"sessionId": root})).json() == {
                "archived": True
            }
        async with httpx.AsyncClient(base_url=b.url, headers={"x-token": token}) as client:
            answer = await client.post("/api/web/chat", json={"sessionId": root, "message": "hi"})
    assert answer.status_code == 409
    assert answer.json() == {"error": f"session {root} is archived"}
    assert [(row[2], row[4]) for row in inbox_rows(cluster)] == [
        (0, f"unavailable: session {root} is archived")
    ]


async def test_a_message_for_a_tree_no_node_owns_makes_the_receiving_node_take_it(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        await trio.to_thread.run_sync(a.start)
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
        a.stop()  # a clean stop gives the lease up
        await trio.to_thread.run_sync(b.start)
        frames = await chat(b, token, root, "anyone there")
    assert frames[-1].type == "complete"
    assert cluster.lease(root) == ("b", 2)
    assert inbox_rows(cluster) == []
