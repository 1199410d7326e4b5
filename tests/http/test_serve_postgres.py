"""``python -m halo_actors serve --store postgresql://…``: real node processes on loopback.

A node takes a tree's lease when it creates it (or is the first to address it), renews
it, and after a crash (SIGKILL) comes back under the same node id, takes its trees back
at once and recovers them the way a restart does: the cut turn closed, the queued
message answered, every record of the new life under the next epoch.
"""

from __future__ import annotations

import httpx
import pytest
import trio
from pg_nodes import Cluster, StoredRecord
from web_client import SseStream

pytestmark = pytest.mark.pg

BUDGET = 60.0


def epochs(records: list[StoredRecord]) -> list[int]:
    """The tree's epochs in seq order, each run of equal ones once."""
    out: list[int] = []
    for record in records:
        if not out or out[-1] != record.epoch:
            out.append(record.epoch)
    return out


async def until_records(cluster: Cluster, root: str, done: object) -> list[StoredRecord]:
    """Poll the tree's records until ``done(records)`` (the caller's deadline bounds it)."""
    assert callable(done)
    while True:
        records = await trio.to_thread.run_sync(cluster.records, root)
        if done(records):
            return records
        await trio.sleep(0.1)


def answered(text: str) -> object:
    """The tree has a round holding ``text`` whose run then ended (``agent_done``)."""

    def check(records: list[StoredRecord]) -> bool:
        rounds = [
            i
            for i, r in enumerate(records)
            if r.kind == "user" and text in str(r.event.get("text", ""))
        ]
        return bool(rounds) and any(r.kind == "agent_done" for r in records[rounds[0] :])

    return check


async def test_serve_store_takes_the_lease_of_a_tree_it_creates(cluster: Cluster) -> None:
    token = cluster.token()
    node = cluster.node("n1")
    await trio.to_thread.run_sync(node.start)
    with trio.fail_after(BUDGET):
        async with httpx.AsyncClient(base_url=node.url, headers={"x-token": token}) as client:
            created = await client.post("/api/web/sessions", json={})
            assert created.status_code == 200, created.text
            root = created.json()["sessionId"]
            async with client.stream(
                "POST", "/api/web/chat", json={"sessionId": root, "message": "hello"}
            ) as resp:
                assert resp.status_code == 200
                frames = await SseStream(resp).take()
            assert frames[-1].type == "complete"
        records = await trio.to_thread.run_sync(cluster.records, root)
    assert cluster.lease(root) == ("n1", 1)
    assert {r.epoch for r in records} == {1}
    assert [r.kind for r in records][:2] == ["session_created", "message_queued"]


async def test_a_node_killed_mid_turn_comes_back_and_answers_the_queued_message(
    cluster: Cluster,
) -> None:
    token = cluster.token()
    node = cluster.node("n1")
    await trio.to_thread.run_sync(node.start)
    with trio.fail_after(BUDGET):
        async with httpx.AsyncClient(base_url=node.url, headers={"x-token": token}) as client:
            created = await client.post("/api/web/sessions", json={})
            root = created.json()["sessionId"]
            async with client.stream(
                "POST", "/api/web/chat", json={"sessionId": root, "message": "count to 200"}
            ) as resp:
                stream = SseStream(resp)
                while not any(f.type == "stream" for f in await stream.take(1)):
                    pass
                queued = await client.post(
                    "/api/web/chat", json={"sessionId": root, "message": "after the crash"}
                )
                assert '"type":"queued"' in queued.text.replace(" ", "")
                node.kill()
        assert cluster.lease(root) == ("n1", 1)
        await trio.to_thread.run_sync(node.start)
        records = await until_records(cluster, root, answered("after the crash"))
    assert cluster.lease(root) == ("n1", 2)
    assert epochs(records) == [1, 2]
    cut = [r for r in records if r.kind == "complete" and r.event.get("stopReason") == "restarted"]
    assert len(cut) == 1 and cut[0].epoch == 2
