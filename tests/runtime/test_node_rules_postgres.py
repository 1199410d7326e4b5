"""Rules of trees owned across nodes, on two runtimes sharing a real PostgreSQL log in
this process (``open_runtime(cluster=…)``, what ``serve --store`` runs per workspace).

- A node that loses a tree in the middle of a turn (its lease taken over) is fenced at
  its next append: it drops its copy quietly (no crash logged, nothing more written);
  the new owner closes the cut turn the way a restart does.
- A deleted tree is never taken over or claimed again (only created anew); a tree
  found deleted on takeover (its owner died before burying its lease) is buried.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import pg_support
import psycopg
import pytest
import trio
from psycopg import sql
from structlog.testing import capture_logs

from halo_actors.agent.model import ModelEvent, ModelRequest
from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.core.errors import SessionNotFound, StoreFailed
from halo_actors.runtime.embed import open_runtime
from halo_actors.runtime.ownership import ClusterStore
from halo_actors.runtime.supervisor import Supervisor

pytestmark = pytest.mark.pg

BUDGET = 30.0
TTL = 60.0
"""Long: no heartbeat runs within a test, so a lost lease is found by a fenced append."""

CRASH_EVENTS = {"turn_crashed", "run_crashed", "closing_records_lost", "cascade_failed"}


class GatedModel(ScriptedModel):
    """Answers only once ``gate`` is set (``entered`` says a turn is waiting for it)."""

    def __init__(self) -> None:
        super().__init__({"default": Script(rules=(Rule(steps=(Step(text="late answer"),)),))})
        self.entered = trio.Event()
        self.gate = trio.Event()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.entered.set()
        await self.gate.wait()
        async for item in super().stream(request):
            yield item


def store(schema: str, node: str) -> ClusterStore:
    return ClusterStore(pg_support.dsn(), schema, node_id=node, lease_ttl=TTL)


def sql_run(
    cluster: ClusterStore, workspace: Path, query: str, *params: object
) -> list[tuple[object, ...]]:
    """``query`` with ``{}`` standing for the workspace log's schema."""
    statement = sql.SQL(query).format(sql.Identifier(cluster.workspace_schema(workspace)))
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=10) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def lease(cluster: ClusterStore, workspace: Path, root: str) -> tuple[str, int, bool]:
    rows = sql_run(
        cluster, workspace, "SELECT node, epoch, deleted FROM {}.leases WHERE root = %s", root
    )
    node, epoch, deleted = rows[0]
    return str(node), int(str(epoch)), bool(deleted)


def kinds_by_epoch(cluster: ClusterStore, workspace: Path, root: str) -> list[tuple[int, str]]:
    rows = sql_run(
        cluster, workspace, "SELECT epoch, kind FROM {}.events WHERE root = %s ORDER BY seq", root
    )
    return [(int(str(e)), str(k)) for e, k in rows]


async def until(check: object) -> None:
    assert callable(check)
    while not check():  # noqa: ASYNC110 - the runtime has no event for "tree dropped"
        await trio.sleep(0.05)


async def test_a_node_fenced_mid_turn_drops_its_copy_without_a_crash(
    tmp_path: Path, pg_schemas: pg_support.SchemaFactory
) -> None:
    """Rule: a Fenced append inside a turn is not a crash: the node that lost the tree
    drops its copy quietly (no crash record or log line, nothing more written), and
    the new owner closes the cut turn the way a restart does."""
    schema, ws = pg_schemas.new(), tmp_path / "ws"
    a_store, b_store = store(schema, "a"), store(schema, "b")
    model = GatedModel()
    with trio.fail_after(BUDGET), capture_logs() as logs:
        async with open_runtime(ws, model=model, cluster=a_store) as a:
            root = await a.create_session()
            await a.send(root, "answer when the gate opens")
            await model.entered.wait()
            # a stalls past its lease: b takes the tree over and recovers it.
            sql_run(
                a_store, ws, "UPDATE {}.leases SET expires_at = '-infinity' WHERE root = %s", root
            )
            async with open_runtime(ws, model=ScriptedModel({}), cluster=b_store) as b:
                assert lease(b_store, ws, root) == ("b", 2, False)
                await b.wait_idle(root)
                model.gate.set()  # a's turn goes on: its next append is refused
                await until(lambda: not a.exists(root))
                assert not a.is_running(root)
    events = {entry["event"] for entry in logs}
    assert events & CRASH_EVENTS == set()
    assert {"lease_lost", "tree_dropped"} <= events
    records = kinds_by_epoch(a_store, ws, root)
    epochs = [e for e, _ in records]
    assert epochs == sorted(epochs), "the epochs of the tree's records never interleave"
    assert [k for e, k in records if e == 1 and k in ("error", "assistant")] == []
    assert [k for e, k in records if e == 2][-3:] == ["error", "complete", "agent_done"]


async def open_and_delete(ws: Path, cluster: ClusterStore) -> str:
    """Node a creates a tree, runs a turn in it, deletes it and shuts down (its leases
    given up, as a node that dies loses them)."""
    async with open_runtime(ws, cluster=cluster) as a:
        root = await a.create_session()
        await a.send(root, "hello")
        await a.wait_idle(root)
        assert await a.delete(root)
    return root


async def never_again(b: Supervisor, root: str) -> None:
    await b.claim(root, create=False)
    assert not b.exists(root)
    with pytest.raises(SessionNotFound):
        await b.send(root, "are you there?")


async def test_a_deleted_tree_is_never_taken_over(
    tmp_path: Path, pg_schemas: pg_support.SchemaFactory
) -> None:
    """Rule: a deleted tree must not be claimed or recovered again (only created anew)."""
    schema, ws = pg_schemas.new(), tmp_path / "ws"
    a_store, b_store = store(schema, "a"), store(schema, "b")
    with trio.fail_after(BUDGET):
        root = await open_and_delete(ws, a_store)
        assert lease(a_store, ws, root) == ("a", 1, True)
        async with open_runtime(ws, cluster=b_store) as b:
            assert await b.owner.scan() == 0  # type: ignore[attr-defined]
            await never_again(b, root)
            assert lease(b_store, ws, root) == ("a", 1, True)
            # Created anew, it is a tree like any other.
            assert await b.create_session(root) == root
            assert b.exists(root)
            assert lease(b_store, ws, root) == ("b", 2, False)


async def test_a_tree_found_deleted_on_takeover_is_buried(
    tmp_path: Path, pg_schemas: pg_support.SchemaFactory
) -> None:
    """Rule: a tree whose owner died after deleting it, before burying its lease, is
    buried by the node that takes it: no node loads it or takes it again."""
    schema, ws = pg_schemas.new(), tmp_path / "ws"
    a_store, b_store = store(schema, "a"), store(schema, "b")
    with trio.fail_after(BUDGET):
        root = await open_and_delete(ws, a_store)
        sql_run(a_store, ws, "UPDATE {}.leases SET deleted = FALSE WHERE root = %s", root)
        async with open_runtime(ws, cluster=b_store) as b:  # its first scan takes the tree
            assert lease(b_store, ws, root) == ("b", 2, True)
            assert root not in b.owner.loaded  # type: ignore[attr-defined]
            await never_again(b, root)
            assert await b.owner.scan() == 0  # type: ignore[attr-defined]
            assert lease(b_store, ws, root) == ("b", 2, True)


async def test_a_message_reaching_a_node_that_just_lost_the_tree_goes_to_its_new_owner(
    tmp_path: Path, pg_schemas: pg_support.SchemaFactory
) -> None:
    """Rule: any node serves any request. A message that reaches a node in the moment it
    lost the tree (its append fenced: nothing stored) is forwarded to the new owner and
    acknowledged once logged there, not refused."""
    schema, ws = pg_schemas.new(), tmp_path / "ws"
    a_store, b_store = store(schema, "a"), store(schema, "b")
    with trio.fail_after(BUDGET):
        async with open_runtime(ws, cluster=a_store) as a:
            root = await a.create_session()
            # a stalls past its lease (it does not know yet): b takes the tree over.
            sql_run(
                a_store, ws, "UPDATE {}.leases SET expires_at = '-infinity' WHERE root = %s", root
            )
            async with open_runtime(ws, cluster=b_store) as b:
                assert lease(b_store, ws, root) == ("b", 2, False)
                assert await a.send(root, "hello by way of a") == "started"
                await b.wait_idle(root)
    records = kinds_by_epoch(a_store, ws, root)
    assert (2, "message_queued") in records and records[-1] == (2, "agent_done")
    assert [e for e, _ in records] == sorted(e for e, _ in records)


async def test_a_node_whose_log_fails_stops_with_the_logs_failure_not_a_crash(
    tmp_path: Path, pg_schemas: pg_support.SchemaFactory
) -> None:
    """Rule (fail-stop): when the node's log writer loses its connection mid-commit, the
    node ends like a lone supervisor: ``open_runtime`` raises the log's bare
    ``StoreFailed`` (what the HTTP front catches to reopen the workspace), not a crash
    wrapped by the node's task groups. (Seen in the nodes chaos suite: a node stalled
    inside a transaction had its writer cut by the server's idle-in-transaction timeout.)"""
    schema, ws = pg_schemas.new(), tmp_path / "ws"
    a_store = store(schema, "a")
    with trio.fail_after(BUDGET):
        with pytest.raises(StoreFailed) as failed:
            async with open_runtime(ws, model=ScriptedModel({}), cluster=a_store) as a:
                root = await a.create_session()
                writer = sql_run(
                    a_store,
                    ws,
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE application_name = 'halo-a' AND query = 'COMMIT'",
                )
                assert len(writer) == 1
                sql_run(a_store, ws, "SELECT pg_terminate_backend(%s)", writer[0][0])
                await a.send(root, "lost with the connection")
        assert "could not commit" in str(failed.value) or "stopped" in str(failed.value)
