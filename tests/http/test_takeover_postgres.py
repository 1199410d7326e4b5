"""Takeover between real ``serve --store`` nodes: one dies (SIGKILL) or stalls (SIGSTOP)
in the middle of a turn running a command, with a message queued behind it.

The other node takes the tree once the lease has run out and recovers it the way a
restart does: the cut turn closed, the queued message answered, every record of it
under the next epoch. The command's process group is the dead node's to kill: the
taker leaves it (recorded for that node), and the node kills it when it comes back.
A stalled node that resumes finds itself fenced: it drops its copy of the tree (its
run cancelled, its command's group killed) and writes nothing more to it.
Woken before its heartbeat notices, it answers reads from the log, not its stale copy.
"""

from __future__ import annotations

import signal
import time

import httpx
import psycopg
import pytest
import trio
from pg_nodes import Cluster, Node, StoredRecord
from proc_table import live_group_members
from psycopg import sql
from test_serve_postgres import answered, epochs, until_records
from web_client import SseStream

pytestmark = pytest.mark.pg

BUDGET = 90.0
TTL = 2.0


async def start(*nodes: Node) -> None:
    for node in nodes:
        await trio.to_thread.run_sync(node.start)


async def busy_tree(cluster: Cluster, node: Node, token: str) -> tuple[str, int]:
    """A tree on ``node`` whose turn runs ``sleep 300`` with a message queued behind it:
    (root, the command's process group)."""
    async with httpx.AsyncClient(base_url=node.url, headers={"x-token": token}) as client:
        root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
        async with client.stream(
            "POST", "/api/web/chat", json={"sessionId": root, "message": "run sleep 300"}
        ) as resp:
            await SseStream(resp).take(1)
            records = await until_records(
                cluster, root, lambda rs: any(r.kind == "command_started" for r in rs)
            )
        queued = await client.post(
            "/api/web/chat", json={"sessionId": root, "message": "after the takeover"}
        )
        assert '"type":"queued"' in queued.text.replace(" ", "")
    pgid = next(int(str(r.event["pgid"])) for r in records if r.kind == "command_started")
    cluster.groups.append(pgid)
    assert live_group_members(pgid)
    return root, pgid


def orphans_for(cluster: Cluster, node: str) -> list[int]:
    query = sql.SQL("SELECT pgid FROM {} WHERE node = %s").format(
        sql.Identifier(cluster.log_schema, "node_orphans")
    )
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        return [int(p) for (p,) in conn.execute(query, (node,)).fetchall()]


async def until_gone(pgid: int) -> None:
    while live_group_members(pgid):  # noqa: ASYNC110 - the process table has no event
        await trio.sleep(0.1)


def recovered_by_b(records: list[StoredRecord]) -> None:
    assert epochs(records) == [1, 2], "the epochs of the tree's records never interleave"
    cut = [r for r in records if r.kind == "complete" and r.event.get("stopReason") == "restarted"]
    assert len(cut) == 1 and cut[0].epoch == 2


async def test_a_killed_nodes_tree_is_taken_over_and_its_queued_message_answered(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        await start(a, b)
        root, pgid = await busy_tree(cluster, a, token)
        a.kill()
        killed = time.monotonic()
        records = await until_records(cluster, root, answered("after the takeover"))
        print(
            f"takeover after kill -9 answered the queued message in {time.monotonic() - killed:.1f}s"
        )
        assert cluster.lease(root) == ("b", 2)
        recovered_by_b(records)
        # The command group a's cut turn left is a's: b left it running, for a.
        assert live_group_members(pgid)
        assert orphans_for(cluster, "a") == [pgid]
        await start(a)  # a comes back: it kills what it left, and forgets it
        await until_gone(pgid)
        assert orphans_for(cluster, "a") == []
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            answer = await client.post("/api/web/stop", json={"sessionId": root})
        assert answer.status_code == 409
        assert answer.json() == {"error": f"tree {root} is owned by node b"}


async def test_a_stalled_node_is_fenced_when_it_resumes_and_drops_its_copy(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        await start(a, b)
        root, pgid = await busy_tree(cluster, a, token)
        a.signal(signal.SIGSTOP)
        stalled = time.monotonic()
        records = await until_records(cluster, root, answered("after the takeover"))
        print(
            f"takeover after SIGSTOP answered the queued message in {time.monotonic() - stalled:.1f}s"
        )
        assert cluster.lease(root) == ("b", 2)
        assert live_group_members(pgid), "b never kills a's command"
        a.signal(signal.SIGCONT)
        await until_gone(pgid)  # a, fenced, dropped the tree: its run's command was killed
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            answer = await client.post("/api/web/stop", json={"sessionId": root})
        assert answer.status_code == 409, "a no longer holds a copy of the tree"
        records = await trio.to_thread.run_sync(cluster.records, root)
    recovered_by_b(records)
    assert "tree_dropped" in (cluster.tmp / "a.log").read_text()


async def test_a_stalled_node_answers_a_follower_from_the_log_not_from_its_stale_copy(
    cluster: Cluster,
) -> None:
    """A node that stalled past its lease is asked to resume a follower before its
    heartbeat notices the loss: it must not answer "idle" from its copy of the tree while
    the new owner's run goes on (a ``complete`` at the resume id, the run's frames lost)."""
    token = cluster.token()
    a, b = cluster.node("a"), cluster.node("b")
    with trio.fail_after(BUDGET):
        await start(a, b)
        async with httpx.AsyncClient(base_url=a.url, headers={"x-token": token}) as client:
            root = (await client.post("/api/web/sessions", json={})).json()["sessionId"]
        a.signal(signal.SIGSTOP)
        await trio.sleep(TTL + 1.0)  # a's lease runs out: b takes the tree when addressed
        body = {"sessionId": root, "message": "run sleep 300"}
        async with (
            httpx.AsyncClient(base_url=b.url, headers={"x-token": token}) as client,
            client.stream("POST", "/api/web/chat", json=body) as resp,
        ):
            assert resp.status_code == 200
            records = await until_records(
                cluster, root, lambda rs: any(r.kind == "command_started" for r in rs)
            )
        pgid = next(int(str(r.event["pgid"])) for r in records if r.kind == "command_started")
        cluster.groups.append(pgid)
        headers = {"x-token": token, "last-event-id": str(records[-1].seq)}
        got: list[str] = []

        async def follow_on_a() -> None:
            async with (
                httpx.AsyncClient(base_url=a.url, headers=headers, timeout=30.0) as client,
                client.stream("GET", "/api/web/subscribe", params={"sessionId": root}) as resp,
            ):
                assert resp.status_code == 200
                stream = SseStream(resp)
                with trio.move_on_after(3.0):
                    while frames := await stream.take(1):
                        got.append(str(frames[0].type))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow_on_a)
            await trio.sleep(0.5)  # the request waits in a's socket while it is stopped
            a.signal(signal.SIGCONT)
        assert got[:1] == ["session"]
        assert "complete" not in got, f"a answered idle while b's run goes on: {got}"
        async with httpx.AsyncClient(base_url=b.url, headers={"x-token": token}) as client:
            assert (await client.post("/api/web/stop", json={"sessionId": root})).status_code == 200
        await until_gone(pgid)
