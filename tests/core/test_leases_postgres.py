"""Tree leases on PostgreSQL: one owner per tree, an epoch that fences a stale owner,
heartbeat renewal, and takeover from a node that was killed (SIGKILL) or stalled
(SIGSTOP) past its lease — the stalled one, resumed, finds itself fenced.

The other node is a real process (``lease_node.py``) with its own connections.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pg_support
import psycopg
import pytest
import trio
from psycopg import sql

from halo_actors.core.errors import Fenced
from halo_actors.core.events import TextStreamed
from halo_actors.core.log.leases import TreeLeases
from halo_actors.core.log.postgres import PostgresEventLog

pytestmark = pytest.mark.pg

BUDGET = 40.0
NODE = Path(__file__).with_name("lease_node.py")
TTL = 1.5


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


@pytest.fixture
def schema(pg_schemas: pg_support.SchemaFactory) -> str:
    return pg_schemas.new()


@pytest.fixture
def raw() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(pg_support.dsn(), autocommit=True) as conn:
        yield conn


@asynccontextmanager
async def node(
    schema: str, node_id: str, *, ttl: float = TTL, lost: list[str] | None = None
) -> AsyncIterator[tuple[PostgresEventLog, TreeLeases]]:
    log = await PostgresEventLog.open(pg_support.dsn(), schema=schema, node_id=node_id)
    try:
        on_lost = lost.append if lost is not None else (lambda root: None)
        async with TreeLeases.open(log, ttl=ttl, on_lost=on_lost) as leases:
            yield log, leases
    finally:
        await log.aclose()


async def test_one_owner_at_a_time_and_a_given_up_tree_changes_hands_with_a_new_epoch(
    schema: str,
) -> None:
    """Rule: "Each tree is owned by one node at a time: a lease with an epoch"."""
    with trio.fail_after(BUDGET):
        async with node(schema, "a") as (log_a, a), node(schema, "b") as (log_b, b):
            assert await a.acquire("t")
            assert a.held == {"t": 1}
            assert not await b.acquire("t")
            assert await b.owner("t") == ("a", 1, True)
            await log_a.append("t>kid", text("a writes"))
            with pytest.raises(Fenced):
                await log_b.append("t", text("b may not"))
            await a.release("t")
            with pytest.raises(Fenced):
                await log_a.append("t", text("a gave it up"))
            assert await b.acquire("t")
            assert b.held == {"t": 2}
            await log_b.append("t", text("b writes"))
            epochs = [r for r in await log_b.read()]
            assert [r.event.text for r in epochs if isinstance(r.event, TextStreamed)] == [
                "a writes",
                "b writes",
            ]
            with pytest.raises(ValueError, match="not a root"):
                await a.acquire("t>kid")


async def test_heartbeats_keep_a_lease_well_past_its_ttl(schema: str) -> None:
    """Rule: "a lease with an epoch, renewed by heartbeat"."""
    with trio.fail_after(BUDGET):
        async with node(schema, "a", ttl=0.6) as (log_a, a), node(schema, "b") as (_, b):
            assert await a.acquire("t")
            await trio.sleep(2.0)  # more than three ttls: only renewal can keep it
            assert not await b.acquire("t")
            assert await b.owner("t") == ("a", 1, True)
            await log_a.append("t", text("still mine"))


async def test_a_node_that_lost_its_lease_is_told_and_refused(
    schema: str, raw: psycopg.Connection[tuple[object, ...]]
) -> None:
    lost: list[str] = []
    with trio.fail_after(BUDGET):
        async with node(schema, "a", lost=lost) as (log_a, a), node(schema, "b") as (_, b):
            assert await a.acquire("t")
            expire = sql.SQL("UPDATE {} SET expires_at = '-infinity'").format(
                sql.Identifier(schema, "leases")
            )
            raw.execute(expire)  # as if a's heartbeats had stopped for a whole ttl
            assert await b.acquire("t")
            await a.renew()
            assert lost == ["t"] and a.held == {}
            with pytest.raises(Fenced, match="does not own"):
                await log_a.append("t", text("too late"))


async def read_lines(
    stream: trio.abc.ReceiveStream, lines: list[str], changed: list[trio.Event]
) -> None:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        lines.extend(line.decode() for line in done)
        changed[0].set()
        changed[0] = trio.Event()


async def wait_for(
    lines: list[str], changed: list[trio.Event], predicate: Callable[[list[str]], bool]
) -> None:
    while not predicate(lines):
        await changed[0].wait()


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
async def test_takeover_after_a_node_is_killed_or_stalled_and_epochs_never_interleave(
    schema: str, raw: psycopg.Connection[tuple[object, ...]], fault: str, tmp_path: Path
) -> None:
    """Rules: "a node that dies (kill -9) or stalls (SIGSTOP past its lease) loses its
    trees; another node takes them within the lease plus a few seconds"; "A resumed
    stale node finds itself fenced"; "0 trees with two writers (checked from the log:
    the epochs of each tree's records never interleave)"."""
    lines: list[str] = []
    changed = [trio.Event()]
    stderr = (tmp_path / "node.err").open("wb")
    process = await trio.lowlevel.open_process(
        [sys.executable, str(NODE), pg_support.dsn(), schema, "stale", str(TTL)],
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None
            nursery.start_soon(read_lines, process.stdout, lines, changed)
            with trio.fail_after(BUDGET):
                await wait_for(
                    lines, changed, lambda ls: sum(1 for x in ls if x.startswith("ack")) >= 5
                )
                os.kill(process.pid, getattr(signal, fault))
                acked = [int(x.split()[1]) for x in lines if x.startswith("ack")]
                async with node(schema, "fresh") as (log, leases):
                    # no timing assertion (a loaded machine); the budget bounds it and
                    # scripts/bench_pg.py measures takeover time
                    while not await leases.acquire("t"):  # noqa: ASYNC110 - polls the database
                        await trio.sleep(0.05)
                    assert leases.held["t"] == 2
                    mine = [await log.append("t", text(f"fresh-{i}")) for i in range(3)]
                    if fault == "SIGSTOP":
                        os.kill(process.pid, signal.SIGCONT)
                        await wait_for(lines, changed, lambda ls: "fenced" in ls)
                        assert await process.wait() == 0
                        acked = [int(x.split()[1]) for x in lines if x.startswith("ack")]
                    mine.append(await log.append("t", text("fresh-last")))
                nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
            with trio.move_on_after(5):
                await process.wait()
        stderr.close()
    rows = raw.execute(
        sql.SQL("SELECT seq, epoch FROM {} WHERE root = 't' ORDER BY seq").format(
            sql.Identifier(schema, "events")
        )
    ).fetchall()
    epochs = [int(e) for _, e in rows]  # type: ignore[call-overload]
    assert epochs == sorted(epochs), "two writers interleaved in one tree"
    assert set(epochs) == {1, 2}
    stored = {int(s) for s, _ in rows}  # type: ignore[call-overload]
    assert set(acked) <= stored  # nothing the stale node acknowledged was lost
    assert {r.seq for batch in mine for r in batch} <= stored
