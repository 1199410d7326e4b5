"""What only the PostgreSQL log promises: several processes (nodes) share one log, read
order is commit order across them, fencing by lease epoch, and a writer that stops
when its connection breaks. The shared contract is in ``test_log_contract.py``.

Each node here is its own ``PostgresEventLog`` with its own connections, exactly as
separate processes would have; the interleavings are forced with real locks held by a
separate connection, and observed in ``pg_stat_activity``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, aclosing
from typing import TypeVar

import pg_support
import psycopg
import pytest
import trio
import trio.testing
from psycopg import sql

from halo_actors.core.errors import Fenced, StoreFailed
from halo_actors.core.events import AgentDone, Record, TextStreamed, encode_record
from halo_actors.core.log import EVERYTHING, EventFilter
from halo_actors.core.log.postgres import PostgresEventLog, record_body

pytestmark = pytest.mark.pg

T = TypeVar("T")
BUDGET = 30.0
Conn = psycopg.Connection[tuple[object, ...]]
OpenNode = Callable[[str], Awaitable[PostgresEventLog]]


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


def seqs(records: list[Record]) -> list[int]:
    return [r.seq for r in records]


@pytest.fixture
async def schema(pg_schemas: pg_support.SchemaFactory) -> str:
    return pg_schemas.new()


@pytest.fixture
async def open_node(schema: str) -> AsyncIterator[OpenNode]:
    """``await open_node("a")``: a log on the test's schema as node ``a`` (closed after)."""
    async with AsyncExitStack() as stack:

        async def open_(node_id: str) -> PostgresEventLog:
            log = await PostgresEventLog.open(pg_support.dsn(), schema=schema, node_id=node_id)
            stack.push_async_callback(log.aclose)
            return log

        yield open_


@pytest.fixture
def raw() -> Iterator[Conn]:
    with psycopg.connect(pg_support.dsn(), autocommit=True) as conn:
        yield conn


async def run(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


async def wait_until_waiting_on_a_lock(watch: Conn, node_ids: list[str]) -> None:
    """Until every named node's writer is blocked on a lock (seen in pg_stat_activity)."""
    names = [f"halo-{n}" for n in node_ids]
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = ANY(%s) AND wait_event_type = 'Lock'"
    )
    while True:
        row = await trio.to_thread.run_sync(lambda: watch.execute(query, (names,)).fetchone())
        assert row is not None
        if row[0] == len(names):
            return
        await trio.sleep(0.02)


async def test_a_record_body_is_exactly_what_encode_record_writes() -> None:
    for event in (text('quote " and \\ back'), AgentDone(), text("ünïcode")):
        record = Record(seq=12345, session_id="web_a-1>x.y", ts=1_700_000_000_123, event=event)
        from halo_actors.core.events import encode_event

        body = record_body(record.seq, record.session_id, record.ts, encode_event(event))
        assert body == encode_record(record)


async def test_reopening_keeps_records_and_continues_numbering(open_node: OpenNode) -> None:
    with trio.fail_after(BUDGET):
        first = await open_node("one")
        stored = await first.append("a", text("1"), text("2"))
        await first.aclose()
        again = await open_node("two")
        assert again.last_seq == 2
        assert await again.read() == stored
        (later,) = await again.append("a", text("3"))
        assert later.seq == 3 and later.ts >= stored[-1].ts


async def test_read_order_is_commit_order_when_commits_interleave(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """Rule: "Read order is commit order ... a reader that reads seq > cursor can skip a row
    that commits later with a lower number. Design so no reader ever skips."

    Node a's commit is held open after it has taken its seqs (a share lock on the events
    table blocks its insert); node b commits meanwhile. A reader polling ``seq > cursor``
    the whole time must see a's records then b's, with no skip, and b may not have
    numbers below a's."""
    a, b, reader = await open_node("a"), await open_node("b"), await open_node("r")
    seen: list[Record] = []
    done = trio.Event()

    async def poll() -> None:
        while not done.is_set():
            seen.extend(await reader.read(after_seq=seen[-1].seq if seen else 0))
            await trio.sleep(0.005)
        seen.extend(await reader.read(after_seq=seen[-1].seq if seen else 0))

    results: dict[str, list[Record]] = {}
    both_stored = trio.Event()

    async def append(log: PostgresEventLog, label: str) -> None:
        results[label] = await log.append(label, text(f"{label}1"), text(f"{label}2"))
        if len(results) == 2:
            both_stored.set()

    with trio.fail_after(BUDGET):
        with psycopg.connect(pg_support.dsn()) as blocker:
            table = sql.SQL("LOCK TABLE {}.events IN SHARE MODE").format(sql.Identifier(schema))
            await run(lambda: blocker.execute(table))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                nursery.start_soon(append, a, "a")
                await wait_until_waiting_on_a_lock(raw, ["a"])
                nursery.start_soon(append, b, "b")
                await wait_until_waiting_on_a_lock(raw, ["a", "b"])
                assert seen == []  # nothing committed yet, though a holds seqs 1-2
                await run(blocker.commit)
                await both_stored.wait()
                done.set()
        assert seqs(results["a"]) == [1, 2] and seqs(results["b"]) == [3, 4]
        assert seen == results["a"] + results["b"]


async def test_the_naive_bigserial_design_does_skip_under_that_interleaving(
    schema: str, raw: Conn
) -> None:
    """Why the design above is needed: with numbers from a sequence, the same interleaving
    (the lower number commits later) makes a ``seq > cursor`` reader skip a row."""
    s = sql.Identifier(schema)
    raw.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    raw.execute(sql.SQL("CREATE TABLE {}.naive (seq BIGSERIAL PRIMARY KEY, v TEXT)").format(s))
    insert = sql.SQL("INSERT INTO {}.naive (v) VALUES (%s) RETURNING seq").format(s)
    with psycopg.connect(pg_support.dsn()) as slow, psycopg.connect(pg_support.dsn()) as fast:
        low = slow.execute(insert, ("slow",)).fetchone()
        high = fast.execute(insert, ("fast",)).fetchone()
        fast.commit()
        after = sql.SQL("SELECT seq FROM {}.naive WHERE seq > %s ORDER BY seq").format(s)
        cursor = max(int(r[0]) for r in raw.execute(after, (0,)).fetchall())  # type: ignore[call-overload]
        slow.commit()
    assert low is not None and high is not None and low[0] < high[0] == cursor
    assert raw.execute(after, (cursor,)).fetchall() == []  # the slow row is never seen


async def test_many_nodes_racing_every_reader_and_subscriber_sees_one_gap_free_order(
    open_node: OpenNode,
) -> None:
    """Three nodes append concurrently; every node's subscriber (from 0 and from a
    mid-stream cursor) and a ``seq > cursor`` poller see exactly the stored order."""
    nodes = [await open_node(f"n{i}") for i in range(3)]
    per_producer, producers = 25, 3
    total = len(nodes) * producers * per_producer
    got: dict[str, list[Record]] = {}
    polled: list[Record] = []

    async def produce(log: PostgresEventLog, label: str) -> None:
        for i in range(per_producer):
            await log.append(f"{label}>c" if i % 4 == 0 else label, text(f"{label}-{i}"))

    async def follow(
        log: PostgresEventLog, name: str, after: int, task_status: trio.TaskStatus[None]
    ) -> None:
        mine = got.setdefault(name, [])
        async with log.subscribe(EVERYTHING, after) as subscription:
            task_status.started()
            async with aclosing(subscription.__aiter__()) as records:  # type: ignore[type-var]
                async for record in records:
                    mine.append(record)
                    if record.seq == total:
                        return

    async def poll(log: PostgresEventLog) -> None:
        while not polled or polled[-1].seq < total:
            polled.extend(await log.read(after_seq=polled[-1].seq if polled else 0))
            await trio.sleep(0.01)

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            for i, log in enumerate(nodes):
                await nursery.start(follow, log, f"sub{i}", 0)
            nursery.start_soon(poll, nodes[0])
            async with trio.open_nursery() as writers:
                for i, log in enumerate(nodes):
                    for p in range(producers):
                        writers.start_soon(produce, log, f"t{i}{p}")
                await trio.sleep(0.05)
                for i, log in enumerate(nodes):
                    await nursery.start(follow, log, f"late{i}", max(0, log.last_seq - 7))
        stored = await nodes[1].read()
        assert seqs(stored) == list(range(1, total + 1))
        assert polled == stored
        for name, records in got.items():
            start = 0 if name.startswith("sub") else records[0].seq - 1
            assert records == stored[start:], name
        ts = [r.ts for r in stored]
        assert ts == sorted(ts)
        tree = await nodes[2].read(EventFilter(tree="t00"))
        assert {r.session_id for r in tree} == {"t00", "t00>c"}


async def lease(raw: Conn, schema: str, root: str, node: str, epoch: int) -> None:
    upsert = sql.SQL(
        "INSERT INTO {}.leases (root, node, epoch, expires_at) VALUES (%s, %s, %s, now())"
        " ON CONFLICT (root) DO UPDATE SET node = excluded.node, epoch = excluded.epoch"
    ).format(sql.Identifier(schema))
    await run(lambda: raw.execute(upsert, (root, node, epoch)))


async def test_an_append_with_a_stale_epoch_is_refused_in_its_transaction(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """Rule: "every append carries the writer's epoch and is refused in the same
    transaction when the epoch is stale (fencing)"."""
    with trio.fail_after(BUDGET):
        a = await open_node("a")
        await lease(raw, schema, "t", "a", 1)
        a.hold("t", 1)
        kept = await a.append("t>child", text("mine"))
        with pytest.raises(Fenced, match="does not own"):
            await a.append("other", text("never held"))
        await lease(raw, schema, "t", "b", 2)  # b took the tree over
        with pytest.raises(Fenced, match="stale"):
            await a.append("t", text("too late"))
        assert isinstance(Fenced("x"), StoreFailed)
        assert await a.read() == kept
        rows = raw.execute(sql.SQL("SELECT epoch FROM {}.events").format(sql.Identifier(schema)))
        assert [r[0] for r in rows] == [1]


async def test_a_takeover_waits_for_a_commit_in_flight_and_fences_what_follows(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """The commit share-locks the lease row: a takeover's epoch bump waits until the
    commit is done, so no append ever commits under an epoch that was already replaced."""
    a = await open_node("a")
    await lease(raw, schema, "t", "a", 1)
    a.hold("t", 1)
    outcome: list[str] = []

    async def append(label: str) -> None:
        try:
            await a.append("t", text(label))
            outcome.append(f"{label} stored")
        except Fenced:
            outcome.append(f"{label} fenced")

    with trio.fail_after(BUDGET):
        with psycopg.connect(pg_support.dsn()) as blocker:
            table = sql.SQL("LOCK TABLE {}.events IN SHARE MODE").format(sql.Identifier(schema))
            await run(lambda: blocker.execute(table))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append, "first")
                await wait_until_waiting_on_a_lock(raw, ["a"])  # holds the lease row share lock
                with psycopg.connect(pg_support.dsn(), application_name="halo-takeover") as other:
                    bump = sql.SQL("UPDATE {}.leases SET node = 'b', epoch = 2 WHERE root = 't'")
                    async with trio.open_nursery() as takeover:
                        takeover.start_soon(
                            run, lambda: other.execute(bump.format(sql.Identifier(schema)))
                        )
                        await wait_until_waiting_on_a_lock(raw, ["a", "takeover"])
                        await run(blocker.commit)
                    await run(other.commit)
        await append("second")
        assert outcome == ["first stored", "second fenced"]


async def test_a_broken_writer_connection_stops_the_writer_and_fails_appends(
    open_node: OpenNode, raw: Conn
) -> None:
    """Fail-stop: once the writer's connection is gone, appends fail (StoreFailed) at once
    instead of waiting, and what was acknowledged before stays readable."""
    with trio.fail_after(BUDGET):
        a = await open_node("a")
        kept = await a.append("s", text("before"))
        # The writer is the one connection of node a that runs transactions (the reader
        # and the tail are in autocommit): its last statement was a COMMIT.
        rows = await run(
            lambda: raw.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE application_name = 'halo-a' AND query = 'COMMIT'"
            ).fetchall()
        )
        writer = [pid for (pid,) in rows]
        assert len(writer) == 1
        await run(lambda: raw.execute("SELECT pg_terminate_backend(%s)", (writer[0],)))
        with pytest.raises(StoreFailed):
            await a.append("s", text("lost"))
        with pytest.raises(StoreFailed):
            await a.append("s", text("later"))
        assert a.failure is not None  # fail-stop, as the protocol says
        assert await a.read() == kept


async def test_catch_up_publishes_every_append_another_node_acknowledged(
    open_node: OpenNode,
) -> None:
    """A read on node b that follows an append acknowledged on node a sees it: ``catch_up``
    reads up to the database's head instead of waiting for b's tail."""
    with trio.fail_after(BUDGET):
        a, b = await open_node("a"), await open_node("b")
        for n in range(5):
            (record,) = await a.append(f"s{n}", text(f"from a {n}"))
            assert await b.catch_up() >= record.seq
            assert (await b.read(EventFilter(session_id=f"s{n}")))[-1] == record
        assert await a.catch_up() == a.last_seq == b.last_seq


async def test_a_node_opening_the_log_never_waits_for_a_commit_in_flight(
    open_node: OpenNode, schema: str
) -> None:
    """Rule: a node that starts (or restarts) while others write takes none of their
    locks. Its schema setup used to wait, holding a share lock on ``events``, for the
    head row a committing writer held, while that writer waited for ``events``: the
    deadlock killed the starting node (a restart in the nodes chaos suite)."""
    await open_node("a")
    writer = await run(lambda: psycopg.connect(pg_support.dsn()))  # one transaction, open
    late: list[PostgresEventLog] = []
    try:
        s = sql.Identifier(schema)
        # What a commit in flight holds: events for writing, the head row locked.
        await run(lambda: writer.execute(sql.SQL("LOCK {}.events IN ROW EXCLUSIVE MODE").format(s)))
        await run(
            lambda: writer.execute(sql.SQL("UPDATE {}.log_head SET last_seq = last_seq").format(s))
        )
        async with trio.open_nursery() as nursery:

            async def open_late() -> None:
                late.append(await open_node("b"))

            nursery.start_soon(open_late)
            with trio.move_on_after(BUDGET / 2):
                while not late:  # noqa: ASYNC110 - the open is a thread: nothing to wait on
                    await trio.sleep(0.05)
            opened_while_held = bool(late)
            await run(writer.rollback)  # lets a blocked open finish, so the test ends
    finally:
        await run(writer.close)
    assert opened_while_held, "the open waited for the writer's transaction"


async def test_a_commit_chosen_as_a_deadlock_victim_is_run_again(
    open_node: OpenNode, schema: str, raw: Conn
) -> None:
    """Rule: an append is refused only when it cannot be stored; a commit the server
    rolled back to break a deadlock stored nothing, so it is run again (it failed its
    batch before: a run whose round could not be stored ended with its acknowledged
    messages still queued and no run to answer them)."""
    a = await open_node("a")
    blocker = await run(lambda: psycopg.connect(pg_support.dsn()))  # one transaction, open
    s = sql.Identifier(schema)
    appended: list[Record] = []
    try:
        with trio.fail_after(BUDGET):
            await run(lambda: blocker.execute(sql.SQL("LOCK {}.events IN SHARE MODE").format(s)))
            async with trio.open_nursery() as nursery:

                async def append() -> None:
                    appended.extend(await a.append("web_x_1", text("hello")))

                nursery.start_soon(append)
                # a's commit holds the head row and waits for events; the blocker then
                # waits for the head row: a waited first, so a's server process finds
                # the deadlock and is rolled back.
                await wait_until_waiting_on_a_lock(raw, ["a"])
                head = sql.SQL("UPDATE {}.log_head SET last_seq = last_seq").format(s)
                await run(lambda: blocker.execute(head))
                await run(blocker.rollback)  # the retry now goes through
    finally:
        await run(blocker.close)
    assert seqs(appended) == [1]
    assert seqs(await a.read(EVERYTHING)) == [1]


UNCLOSED = """
import sys, trio
from halo_actors.core.events import TextStreamed
from halo_actors.core.log.postgres import PostgresEventLog

async def main():
    log = await PostgresEventLog.open(sys.argv[1], schema=sys.argv[2])
    await log.append("s1", TextStreamed(text="kept"))
    print("appended", flush=True)  # and returns without closing the log

trio.run(main)
"""


async def test_a_program_that_never_closes_its_log_still_exits_and_keeps_what_was_durable(
    schema: str, open_node: OpenNode
) -> None:
    """The writer and tail are daemon threads: an unclosed log does not hold the process."""
    with trio.fail_after(BUDGET):
        done = await trio.run_process(
            [sys.executable, "-c", UNCLOSED, pg_support.dsn(), schema],
            capture_stdout=True,
            capture_stderr=True,
        )
        assert done.stdout == b"appended\n", done.stderr
        assert b"event_log_writer_stopped" not in done.stderr
        reader = await open_node("reader")
        assert [r.event for r in await reader.read()] == [text("kept")]
