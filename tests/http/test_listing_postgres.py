"""Any node serves any request, listings included: ``GET /api/web/sessions`` and the
session a request without ``sessionId`` means come from the shared log, not from the
trees the node that was reached has loaded.

Two real ``serve --store`` nodes on loopback; each creates trees of its own (so each
has loaded only those).
"""

from __future__ import annotations

import httpx
import pytest
import trio
from pg_nodes import Cluster
from test_forwarding_postgres import chat

pytestmark = pytest.mark.pg

BUDGET = 60.0


async def sessions(url: str, token: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=url, headers={"x-token": token}) as client:
        answer = await client.get("/api/web/sessions")
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, object]] = answer.json()["sessions"]
    return rows


async def mint(url: str, token: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"x-token": token}) as client:
        answer = await client.post("/api/web/sessions", json={})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["sessionId"])


async def test_every_node_lists_every_tree_the_token_may_see(cluster: Cluster) -> None:
    """Rule (issue 18, any node serves any request): a listing shows every tree the
    token may see, from the shared log, on whichever node the client reached (the
    session list, the session a request without ``sessionId`` means, ``/tree`` and
    ``/session switch``)."""
    alice, bob = cluster.token(account="alice"), cluster.token(account="bob")
    n1, n2 = cluster.node("n1"), cluster.node("n2")
    with trio.fail_after(BUDGET):
        for node in (n1, n2):
            await trio.to_thread.run_sync(node.start)
        on_n2 = await mint(n2.url, alice)
        archived = await mint(n1.url, alice)
        on_n1 = await mint(n1.url, alice)
        await chat(n1, alice, on_n1, "Plan the garden\nwith beans")  # the newest, titled
        async with httpx.AsyncClient(base_url=n1.url, headers={"x-token": alice}) as client:
            answer = await client.post("/api/web/archive", json={"sessionId": archived})
            assert answer.json() == {"archived": True}
        theirs = await mint(n2.url, bob)

        listed = {node.node_id: await sessions(node.url, alice) for node in (n1, n2)}
        assert [row["sessionId"] for row in listed["n2"]] == [on_n1, on_n2]
        assert listed["n1"] == listed["n2"]
        assert [row["title"] for row in listed["n2"]] == ["Plan the garden", None]
        assert [row["sessionId"] for row in await sessions(n1.url, bob)] == [theirs]

        # A request without sessionId means the caller's latest tree, wherever it lives.
        async with httpx.AsyncClient(base_url=n2.url, headers={"x-token": alice}) as client:
            history = await client.get("/api/web/history")
        assert history.json()["sessionId"] == on_n1

        # The slash commands that list a tree or look a session up, on the non-owner.
        tree = str([f.data for f in await chat(n2, alice, on_n1, "/tree")])
        assert on_n1 in tree and "Plan the garden" in tree and "[idle]" in tree
        switched = str([f.data for f in await chat(n2, alice, on_n2, f"/session switch {on_n1}")])
        assert on_n1 in switched and "does not exist yet" not in switched
