"""What only a single-writer PostgreSQL log promises (``single_writer=True``).

It is pipelined (the shared contract, ``test_log_contract.py`` and
``test_log_pipelined.py``, runs on it as the ``postgres`` backend); here: it is the
schema's only writer (an advisory lock keeps shared nodes and a second single writer
out), each commit checks the head is where this node's stamps began, and every
failed commit (a moved head, a stale epoch, a broken connection) stops the log with
nothing of the failed batch stored or published (fail-stop), as with SQLite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from typing import TypeVar

import pg_support
import psycopg
import pytest
import trio
from psycopg import sql

from halo_actors.core.errors import StoreFailed, SubscriptionClosed
from halo_actors.core.events import TextStreamed
from halo_actors.core.log.postgres import PostgresEventLog

pytestmark = pytest.mark.pg

T = TypeVar("T")
BUDGET = 30.0
Conn = psycopg.Connection[tuple[object, ...]]
OpenNode = Callable[..., Awaitable[PostgresEventLog]]


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


@pytest.fixture
async def schema(pg_schemas: pg_support.SchemaFactory) -> str:
    return pg_schemas.new()


@pytest.fixture
async def open_node(schema: str) -> AsyncIterator[OpenNode]:
    """``await open_node("a", single_writer=True)``: a log on the test's schema."""
    async with AsyncExitStack() as stack:

        async def open_(node_id: str, *, single_writer: bool = True) -> PostgresEventLog:
            log = await PostgresEventLog.open(
                pg_support.dsn(), schema=schema, node_id=node_id, single_writer=single_writer
            )
            stack.push_async_callback(log.aclose)
            return log

        yield open_


@pytest.fixture
def raw() -> Iterator[Conn]:
    with psycopg.connect(pg_support.dsn(), autocommit=True) as conn:
        yield conn


async def run(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


async def test_a_single_writer_log_is_the_only_writer_of_its_schema(open_node: OpenNode) -> None:
    with trio.fail_after(BUDGET):
        shared = await open_node("shared", single_writer=False)
        with pytest.raises(StoreFailed, match="only writer"):
            await open_node("single")
        await shared.aclose()
        single = await open_node("single")
        assert single.pipelined
        with pytest.raises(StoreFailed, match="single-writer node"):
            await open_node("late", single_writer=False)
        with pytest.raises(StoreFailed, match="only writer"):
            await open_node("second")
        await single.aclose()
        again = await open_node("shared-again", single_writer=False)
        assert not again.pipelined


async def test_a_commit_that_finds_the_head_moved_stores_nothing_and_stops_the_log(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """Another writer taking seqs behind a single writer's back (here: by hand) breaks the
    rule its stamps rely on: the next commit stores nothing and the log fails."""
    with trio.fail_after(BUDGET):
        log = await open_node("a")
        kept = await log.append("s", text("before"))
        head = sql.SQL("UPDATE {}.log_head SET last_seq = last_seq + 5").format(
            sql.Identifier(schema)
        )
        await run(lambda: raw.execute(head))
        lost = log.append_nowait("s", text("lost"))
        with pytest.raises(StoreFailed, match="another writer took seqs"):
            await log.wait_durable(lost[-1].seq)
        failure = await log.wait_failed()
        assert "another writer" in str(failure)
        with pytest.raises(StoreFailed):
            log.append_nowait("s", text("later"))
        assert log.last_seq == kept[-1].seq
        assert await log.read() == kept


async def test_a_stale_epoch_at_commit_stops_a_single_writer_log(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """A single writer cannot drop one append (the seqs after it are out already): a
    fenced commit stores nothing and the log fails."""
    with trio.fail_after(BUDGET):
        log = await open_node("a")
        upsert = sql.SQL(
            "INSERT INTO {}.leases (root, node, epoch, expires_at) VALUES (%s, %s, %s, now())"
            " ON CONFLICT (root) DO UPDATE SET node = excluded.node, epoch = excluded.epoch"
        ).format(sql.Identifier(schema))
        await run(lambda: raw.execute(upsert, ("t", "a", 1)))
        log.hold("t", 1)
        kept = await log.append("t>x", text("mine"))
        await run(lambda: raw.execute(upsert, ("t", "b", 2)))  # b took the tree over
        with pytest.raises(StoreFailed, match="stale"):
            await log.append("t", text("too late"))
        assert log.failure is not None
        assert await log.read() == kept


async def test_a_broken_writer_connection_ends_subscriptions_and_a_reopen_recovers(
    open_node: OpenNode, raw: Conn
) -> None:
    """Fail-stop: the queued records are never published, subscribers end, and a reopen
    recovers the durable prefix and numbers on from it."""
    with trio.fail_after(BUDGET):
        log = await open_node("a")
        kept = await log.append("s", text("kept"))
        seen = []
        async with log.subscribe() as sub:
            records = aiter(sub)
            seen.append(await anext(records))
            assert log._writer_conn is not None
            writer = log._writer_conn.info.backend_pid  # not by a query on pg_stat_activity:
            # a closed connection of an earlier test can still be listed there for a moment
            rows = await run(
                lambda: raw.execute(
                    "SELECT query FROM pg_stat_activity WHERE pid = %s", (writer,)
                ).fetchall()
            )
            assert rows == [("COMMIT",)]
            await run(lambda: raw.execute("SELECT pg_terminate_backend(%s)", (writer,)))
            lost = log.append_nowait("s", text("lost"))
            with pytest.raises(StoreFailed):
                await log.wait_durable(lost[-1].seq)
            with pytest.raises(SubscriptionClosed):
                async for record in records:
                    seen.append(record)
        assert seen == kept
        await log.aclose()
        again = await open_node("b")
        assert await again.read() == kept
        (next_record,) = await again.append("s", text("next"))
        assert next_record.seq == kept[-1].seq + 1
