"""The event-log contract, part two: pipelined appends and the durable horizon.

Same fixtures as ``test_log_contract.py`` (every backend of ``tests/conftest.py``).
A pipelined backend stamps in ``append_nowait`` and makes records durable in seq
order; ``last_seq`` is the durable horizon. The rule every test here checks in
its own way: **no reader ever sees a record that is not durable, and none is
skipped**. A backend that is not pipelined skips the ``append_nowait`` tests and
must still keep the horizon rules. Fail-stop (a failed commit) needs a fault at
the writer, so it is tested per backend (``test_log_sqlite_failures.py``).
"""

from __future__ import annotations

import pytest
import trio

from halo_actors.core.errors import EventTooLarge, InvalidInput, StoreClosed, UnsafeSessionId
from halo_actors.core.events import Record, SessionFrame, TextStreamed
from halo_actors.core.log import (
    EVERYTHING,
    MAX_BACKLOG,
    EventFilter,
    MemoryEventLog,
    SqliteEventLog,
)
from halo_actors.core.log.postgres import PostgresEventLog

Log = MemoryEventLog | SqliteEventLog | PostgresEventLog
BUDGET = 10.0


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


def seqs(records: list[Record]) -> list[int]:
    return [r.seq for r in records]


def pipelined(log: Log) -> None:
    if not log.pipelined:
        pytest.skip("this backend is not pipelined (its seqs come from the commit)")


async def test_a_healthy_log_has_no_failure_and_nothing_in_flight_after_append(
    event_log: Log,
) -> None:
    with trio.fail_after(BUDGET):
        assert event_log.failure is None
        records = await event_log.append("a", text("one"), text("two"))
        assert event_log.last_seq == event_log.stamped_seq == records[-1].seq
        await event_log.wait_durable(records[-1].seq)  # durable already: returns at once


async def test_waiting_for_a_seq_never_stamped_is_refused(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await event_log.append("a", text("one"))
        with pytest.raises(InvalidInput, match="never stamped"):
            await event_log.wait_durable(event_log.stamped_seq + 1)


async def test_append_nowait_stamps_at_once_in_one_order_with_append(event_log: Log) -> None:
    pipelined(event_log)
    with trio.fail_after(BUDGET):
        first = event_log.append_nowait("a", text("n1"), text("n2"))
        middle = await event_log.append("b", text("d1"))
        last = event_log.append_nowait("a>x", text("n3"))
        assert seqs(first + middle + last) == [1, 2, 3, 4]
        assert event_log.stamped_seq == 4
        await event_log.wait_durable(4)
        assert event_log.last_seq == 4
        assert await event_log.read() == first + middle + last


async def test_last_seq_never_passes_a_record_that_cannot_be_read(event_log: Log) -> None:
    """Whenever a reader takes ``last_seq`` as its bound, everything up to it is there."""
    pipelined(event_log)
    total = 600
    checks = 0

    async def reader() -> None:
        nonlocal checks
        while True:
            bound = event_log.last_seq
            got = await event_log.read(until_seq=bound)
            assert seqs(got) == list(range(1, bound + 1))
            checks += 1
            if bound == total:
                return
            await trio.lowlevel.checkpoint()

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            for i in range(total // 3):
                event_log.append_nowait(f"s{i % 7}", text(f"{i}a"), text(f"{i}b"))
                event_log.append_nowait(f"s{i % 5}>c", text(f"{i}c"))
                if i % 10 == 0:
                    await trio.lowlevel.checkpoint()
        assert checks >= 1


async def test_subscribers_get_pipelined_records_durable_in_order_without_gap(
    event_log: Log,
) -> None:
    """A subscriber never gets a record past ``last_seq`` and never misses one."""
    pipelined(event_log)
    total = 400
    got: dict[str, list[Record]] = {"all": [], "tree": []}

    async def follow(name: str, flt: EventFilter, want: int, task_status: trio.TaskStatus) -> None:
        async with event_log.subscribe(flt, 0) as subscription:
            task_status.started()
            async for record in subscription:
                assert record.seq <= event_log.last_seq
                got[name].append(record)
                if len(got[name]) == want:
                    return

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            await nursery.start(follow, "all", EVERYTHING, total)
            await nursery.start(follow, "tree", EventFilter(tree="t"), total // 2)
            for i in range(total):
                event_log.append_nowait("t>c" if i % 2 else f"u{i % 3}", text(str(i)))
                if i % 25 == 0:
                    await trio.lowlevel.checkpoint()
        stored = await event_log.read()
        assert got["all"] == stored
        assert seqs(stored) == list(range(1, total + 1))
        assert got["tree"] == [r for r in stored if r.session_id == "t>c"]


async def test_cancelling_a_wait_for_durability_loses_nothing(event_log: Log) -> None:
    pipelined(event_log)
    with trio.fail_after(BUDGET):
        records = event_log.append_nowait("a", text("one"), text("two"))
        with trio.CancelScope() as scope:
            scope.cancel()
            await event_log.wait_durable(records[-1].seq)
        await event_log.wait_durable(records[-1].seq)
        assert await event_log.read() == records


async def test_append_nowait_refuses_what_append_refuses_and_stamps_nothing(
    event_log: Log,
) -> None:
    pipelined(event_log)
    with trio.fail_after(BUDGET):
        event_log.append_nowait("a", text("one"))
        with pytest.raises(UnsafeSessionId):
            event_log.append_nowait("a b", text("x"))
        with pytest.raises(EventTooLarge):
            event_log.append_nowait("a", text("x" * (event_log.max_event_bytes + 1)))
        with pytest.raises(InvalidInput, match="never stored"):
            event_log.append_nowait("a", SessionFrame(session_id="a"))
        with pytest.raises(InvalidInput):
            event_log.append_nowait("a")
        assert event_log.stamped_seq == 1
        (two,) = event_log.append_nowait("a", text("two"))
        assert two.seq == 2
        await event_log.wait_durable(2)
        await event_log.aclose()
        with pytest.raises(StoreClosed):
            event_log.append_nowait("a", text("closed"))


async def test_a_log_is_backlogged_past_max_backlog_records_in_flight_and_not_after(
    event_log: Log,
) -> None:
    """Rule: the commit queue is bounded by its producers; the log says when to wait."""
    pipelined(event_log)
    with trio.fail_after(BUDGET):
        event_log.append_nowait("a", *[text("x")] * MAX_BACKLOG)
        assert not event_log.backlogged  # at the bound, not past it
        event_log.append_nowait("a", text("one more"))
        durable_as_stamped = isinstance(event_log, MemoryEventLog)
        assert event_log.backlogged is not durable_as_stamped
        await event_log.wait_durable(event_log.stamped_seq)
        assert not event_log.backlogged
