"""Tokens shared through the database: two real ``serve --store postgresql://…`` nodes.

A token made in the deployment's token table (``PgTokenStore.create``, what ``token
create --store`` runs; the command itself is tested in ``test_token_stores.py``) works on
every node, also one made after the nodes started (the token list is the deployment's,
not a node's); revoked with the real ``token revoke --store`` command, it is refused by
every node. The rule is "within 1 s": the
time each node took is measured and printed (``-s``), not asserted (timing never gates
a test; ``scripts/bench_pg.py`` reports it).
"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
import trio
from pg_nodes import Cluster, Node

pytestmark = pytest.mark.pg

BUDGET = 60.0


def token_command(cluster: Cluster, *argv: str) -> str:
    """``python -m halo_actors token … --store DSN --store-schema S``; its stdout."""
    command = [sys.executable, "-m", "halo_actors", "token", *argv]
    command += ["--store", cluster.dsn, "--store-schema", cluster.schema]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


async def status(node: Node, token: str) -> int:
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as client:
        resp = await client.get("/api/web/sessions", headers={"x-token": token})
        return resp.status_code


async def test_a_token_works_on_every_node_and_a_revocation_reaches_every_node(
    cluster: Cluster,
) -> None:
    first = cluster.token(account="alice")  # what token create --store does
    n1, n2 = cluster.node("n1"), cluster.node("n2")
    async with trio.open_nursery() as nursery:
        for node in (n1, n2):
            nursery.start_soon(trio.to_thread.run_sync, node.start)
    with trio.fail_after(BUDGET):
        assert [await status(n1, first), await status(n2, first)] == [200, 200]
        later = await trio.to_thread.run_sync(lambda: cluster.token(account="bob"))
        for node in (n1, n2):  # made after the nodes started: each sees it (its next reload)
            while await status(node, later) != 200:  # noqa: ASYNC110 - polls the node
                await trio.sleep(0.05)
        await trio.to_thread.run_sync(token_command, cluster, "revoke", first)
        revoked_at = time.monotonic()
        took: dict[str, float] = {}
        while len(took) < 2:
            for node in (n1, n2):
                if node.node_id not in took and await status(node, first) == 401:
                    took[node.node_id] = time.monotonic() - revoked_at
            await trio.sleep(0.02)
        assert [await status(n1, later), await status(n2, later)] == [200, 200]
    print(f"revocation refused after: {', '.join(f'{k} {v:.3f} s' for k, v in took.items())}")
