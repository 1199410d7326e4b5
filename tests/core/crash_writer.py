"""Append to a SQLite event log forever, acknowledging each durable seq on stdout.

Usage: ``python tests/core/crash_writer.py DB SEED``

Several producer tasks append concurrently (single and multi-event appends, small
and page-spanning bodies, several sessions of two trees). After an ``append``
returns, every seq it got is printed on its own line and stdout is flushed: a
printed seq is one the log has acknowledged as durable. ``test_log_crash.py`` runs
this as a real process, SIGKILLs it at a random moment and checks the file.
"""

from __future__ import annotations

import random
import sys

import trio

from halo_actors.core.events import Event, TextStreamed, ToolCalled
from halo_actors.core.log import SqliteEventLog

PRODUCERS = 6
SESSIONS = ("crash_a", "crash_a>c1", "crash_a>c1>g", "crash_b", "crash_b>c2")


def acknowledge(seqs: list[int]) -> None:
    sys.stdout.write("".join(f"{seq}\n" for seq in seqs))
    sys.stdout.flush()


def some_events(rng: random.Random, producer: int, n: int) -> list[Event]:
    count = rng.choice((1, 1, 1, 2, 5))
    size = rng.choice((10, 10, 100, 300, 6_000))  # the largest span two SQLite pages
    events: list[Event] = [
        TextStreamed(text=f"{producer}.{n}.{k}:" + "x" * size) for k in range(count)
    ]
    if rng.random() < 0.2:
        events.append(
            ToolCalled(tool_name="shell", tool_use_id=f"{producer}.{n}", tool_input={"n": n})
        )
    return events


async def producer(log: SqliteEventLog, rng: random.Random, index: int) -> None:
    n = 0
    while True:
        records = await log.append(rng.choice(SESSIONS), *some_events(rng, index, n))
        acknowledge([r.seq for r in records])
        n += 1


async def main(db: str, seed: int) -> None:
    log = await SqliteEventLog.open(db)
    try:
        async with trio.open_nursery() as nursery:
            for index in range(PRODUCERS):
                nursery.start_soon(producer, log, random.Random(seed * 1_000 + index), index)
    finally:
        with trio.CancelScope(shield=True):
            await log.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
