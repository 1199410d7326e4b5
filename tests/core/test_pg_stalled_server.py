"""A PostgreSQL server that stops answering (here: a loopback proxy that stops
forwarding, as a server under SIGSTOP looks to its clients) never holds a close, nor an
append for ever: the log's tail and the inbox's listener are woken without a round trip
to it, a commit is cut at its deadline and the log fails (``core/log/pgcut.py``), and no
thread of theirs keeps a program alive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import pg_support
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from stall_proxy import StallProxy, stall_proxy

from halo_actors.core.errors import StoreFailed
from halo_actors.core.events import TextStreamed
from halo_actors.core.log.inbox import Inbox
from halo_actors.core.log.pgcut import ListenerSocket
from halo_actors.core.log.pgtail import POLL_SECONDS, RECONNECT_SECONDS
from halo_actors.core.log.postgres import PostgresEventLog

pytestmark = pytest.mark.usefixtures("pg_schemas")

CLOSE_BUDGET = RECONNECT_SECONDS + POLL_SECONDS + 1.0
"""Seconds a close may take with the server stalled: the tail thread's join is bounded
by ``RECONNECT_SECONDS + POLL_SECONDS`` (a tail caught inside a connect to the stalled
server is left to end alone, a daemon), plus a second for the rest on a busy machine."""
WATCHDOG = 20.0
"""After this long the test lets the server answer again, so a close that waits on it
fails the test instead of hanging it (closes run shielded)."""


@asynccontextmanager
async def through_stall_proxy(
    pg_schemas: pg_support.SchemaFactory,
    *,
    single_writer: bool = False,
    commit_deadline: float = 30,
    read_deadline: float = 30,
) -> AsyncIterator[tuple[StallProxy, PostgresEventLog]]:
    """A log on a fresh schema whose every connection goes through a stall proxy."""
    server = conninfo_to_dict(pg_support.dsn())
    target = (str(server.get("host") or "127.0.0.1"), int(str(server.get("port") or 5432)))
    async with stall_proxy(target) as proxy:
        dsn = make_conninfo(pg_support.dsn(), host="127.0.0.1", port=str(proxy.port))
        log = await PostgresEventLog.open(
            dsn,
            schema=pg_schemas.new(),
            single_writer=single_writer,
            commit_deadline=commit_deadline,
            read_deadline=read_deadline,
        )
        try:
            yield proxy, log
        finally:
            proxy.resume()
            await log.aclose()


async def until_listening(listener: ListenerSocket) -> None:
    """Until the listener thread has its connection (it connects through the proxy)."""
    while listener._conn is None:  # noqa: ASYNC110  (set by a thread: no event to wait on)
        await trio.sleep(0.01)


@asynccontextmanager
async def stalled(proxy: StallProxy) -> AsyncIterator[Callable[[], bool]]:
    """The server stalled for the block, or until ``WATCHDOG`` seconds have passed (then
    it answers again, so a shielded wait on it ends and fails the test instead of
    hanging it); yields "did the watchdog have to release it?". It answers after."""
    proxy.pause()
    released = False

    async def watchdog() -> None:
        nonlocal released
        await trio.sleep(WATCHDOG)
        released = True
        proxy.resume()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog)
        yield lambda: released
        nursery.cancel_scope.cancel()
    proxy.resume()


async def closes_while_stalled(proxy: StallProxy, close: Callable[[], Awaitable[None]]) -> None:
    """Stall the server, run ``close``, and check it ended in time without the server."""
    async with stalled(proxy) as released:
        started = trio.current_time()
        await close()
        took = trio.current_time() - started
    assert not released(), "the close waited for the server to answer"
    assert took < CLOSE_BUDGET, f"the close took {took:.1f} s with the server stalled"


async def test_closing_the_inbox_does_not_wait_on_a_stalled_server(
    pg_schemas: pg_support.SchemaFactory,
) -> None:
    with trio.fail_after(60):
        async with through_stall_proxy(pg_schemas) as (proxy, log), AsyncExitStack() as stack:
            inbox = await stack.enter_async_context(Inbox.open(log))
            assert inbox._thread.daemon, "a listener must not keep a program alive"
            await until_listening(inbox._listening)
            await closes_while_stalled(proxy, stack.aclose)
            assert not inbox._thread.is_alive()


@pytest.mark.parametrize("single_writer", [False, True], ids=["shared", "single-writer"])
async def test_closing_the_log_does_not_wait_on_a_stalled_server(
    pg_schemas: pg_support.SchemaFactory, single_writer: bool
) -> None:
    with trio.fail_after(60):
        async with through_stall_proxy(pg_schemas, single_writer=single_writer) as (proxy, log):
            assert log._tail._thread.daemon, "a tail must not keep a program alive"
            if not single_writer:  # a single writer follows nobody: no tail
                await until_listening(log._tail._listening)
            await closes_while_stalled(proxy, log.aclose)
            assert not log._tail._thread.is_alive()


@pytest.mark.parametrize("single_writer", [False, True], ids=["shared", "single-writer"])
async def test_a_commit_to_a_stalled_server_is_cut_at_its_deadline_and_the_log_fails(
    pg_schemas: pg_support.SchemaFactory, single_writer: bool
) -> None:
    deadline = 1.0
    with trio.fail_after(60):
        async with through_stall_proxy(
            pg_schemas, single_writer=single_writer, commit_deadline=deadline
        ) as (proxy, log):
            await log.append("s1", TextStreamed(text="before the stall"))
            async with stalled(proxy) as released:
                started = trio.current_time()
                with pytest.raises(StoreFailed):  # its outcome is unknown: never acknowledged
                    await log.append("s1", TextStreamed(text="during the stall"))
                took = trio.current_time() - started
            assert not released(), "the append waited for the server to answer"
            assert took < deadline * 1.25 + CLOSE_BUDGET, f"the append failed after {took:.1f} s"
            assert log.failure is not None, "a cut commit fails the log (fail-stop)"
            with pytest.raises(StoreFailed):
                await log.append("s1", TextStreamed(text="after the failure"))
            await closes_while_stalled(proxy, log.aclose)


async def test_reads_go_on_after_the_server_drops_every_connection(
    pg_schemas: pg_support.SchemaFactory,
) -> None:
    """A server restart closes every connection: the next read is served on a new one
    (reads are idempotent: a read that finds its connection gone is run again, once)."""
    with trio.fail_after(60):
        async with through_stall_proxy(pg_schemas) as (proxy, log):
            await log.append("s1", TextStreamed(text="stored"))
            assert [r.event for r in await log.read()] == [TextStreamed(text="stored")]
            proxy.drop_all()
            await trio.sleep(0.1)  # the proxy's connections end
            assert [r.event for r in await log.read()] == [TextStreamed(text="stored")]
            assert await log.catch_up() >= 1


async def test_a_read_from_a_stalled_server_is_cut_at_its_deadline_and_the_next_one_reconnects(
    pg_schemas: pg_support.SchemaFactory,
) -> None:
    deadline = 1.0
    with trio.fail_after(60):
        async with through_stall_proxy(pg_schemas, read_deadline=deadline) as (proxy, log):
            await log.append("s1", TextStreamed(text="stored"))
            async with stalled(proxy) as released:
                started = trio.current_time()
                with pytest.raises(psycopg.OperationalError):
                    await log.read()
                took = trio.current_time() - started
            assert not released(), "the read waited for the server to answer"
            assert took < deadline * 1.25 + CLOSE_BUDGET, f"the read failed after {took:.1f} s"
            assert log.failure is None, "a cut read fails alone: the log goes on"
            assert [r.event for r in await log.read()] == [TextStreamed(text="stored")]
