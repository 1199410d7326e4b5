"""The PostgreSQL inbox (``core/log/inbox.py``) against a real server, here through a
proxy that can stall it: closing the inbox never waits on a server that stopped
answering, and its listener thread never keeps a program alive."""

from __future__ import annotations

import pg_support
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from stall_proxy import stall_proxy

from halo_actors.core.log.inbox import Inbox
from halo_actors.core.log.postgres import PostgresEventLog

pytestmark = pytest.mark.usefixtures("pg_schemas")

CLOSE_BUDGET = 3.0
"""Seconds a close may take with the server stalled (the listener polls every second)."""
WATCHDOG = 20.0
"""After this long the test lets the server answer again, so a close that waits on it
fails the test instead of hanging it (the close runs shielded)."""


async def test_closing_the_inbox_does_not_wait_on_a_stalled_server(
    pg_schemas: pg_support.SchemaFactory,
) -> None:
    server = conninfo_to_dict(pg_support.dsn())
    target = (str(server.get("host", "127.0.0.1")), int(str(server.get("port") or 5432)))
    with trio.fail_after(60):
        async with stall_proxy(target) as proxy:
            dsn = make_conninfo(pg_support.dsn(), host="127.0.0.1", port=str(proxy.port))
            log = await PostgresEventLog.open(dsn, schema=pg_schemas.new())
            try:
                async with trio.open_nursery() as nursery:
                    released = trio.Event()

                    async def watchdog() -> None:
                        await trio.sleep(WATCHDOG)
                        released.set()
                        proxy.resume()

                    nursery.start_soon(watchdog)
                    async with Inbox.open(log) as inbox:
                        assert inbox._thread.daemon, "a listener must not keep a program alive"
                        await trio.sleep(0.2)  # the listener is connected and listening
                        proxy.pause()
                        started = trio.current_time()
                    took = trio.current_time() - started
                    nursery.cancel_scope.cancel()
                assert not released.is_set(), "the close waited for the server to answer"
                assert took < CLOSE_BUDGET, f"the close took {took:.1f} s with the server stalled"
                assert not inbox._thread.is_alive()
            finally:
                proxy.resume()
                await log.aclose()
