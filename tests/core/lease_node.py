"""A node that owns tree ``t`` and appends to it forever, reporting on stdout.

Usage: ``python tests/core/lease_node.py DSN SCHEMA NODE_ID TTL``

It takes the lease of ``t`` (waiting until it is free), then appends one record at a
time. Lines on stdout (flushed each time): ``acquired <epoch>``, ``ack <seq>`` after
each acknowledged append, ``lost`` when its heartbeat finds the lease gone, and
``fenced`` when an append is refused for a stale epoch, after which it exits 0.
``test_leases_postgres.py`` SIGKILLs or SIGSTOPs it while another node takes over.
"""

from __future__ import annotations

import sys

import trio

from halo_actors.core.errors import Fenced
from halo_actors.core.events import TextStreamed
from halo_actors.core.log.leases import TreeLeases
from halo_actors.core.log.postgres import PostgresEventLog


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(dsn: str, schema: str, node_id: str, ttl: float) -> None:
    log = await PostgresEventLog.open(dsn, schema=schema, node_id=node_id)
    try:
        async with TreeLeases.open(log, ttl=ttl, on_lost=lambda root: say("lost")) as leases:
            while not await leases.acquire("t"):  # noqa: ASYNC110 - polls the database
                await trio.sleep(0.1)
            say(f"acquired {leases.held['t']}")
            n = 0
            while True:
                try:
                    (record,) = await log.append("t", TextStreamed(text=f"{node_id}-{n}"))
                except Fenced:
                    say("fenced")
                    return
                say(f"ack {record.seq}")
                n += 1
                await trio.sleep(0.01)
    finally:
        await log.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
