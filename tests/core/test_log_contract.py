"""The event-log contract: one suite, run against every backend.

Every test takes the ``event_log`` (or ``open_event_log``) fixture from
``tests/conftest.py``, which is parametrised over the backends, so a new backend
joins the suite by being added there (the eventsourcing ``tests/persistence.py`` /
akka ``JournalSpec`` idea). SQLite-only behaviour lives in ``test_log_sqlite.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from typing import cast

import pytest
import trio
import trio.testing

from halo_actors.core.errors import (
    EventTooLarge,
    InvalidInput,
    StoreClosed,
    SubscriptionClosed,
    SubscriptionOverflow,
    UnsafeSessionId,
)
from halo_actors.core.events import (
    FRAME_ONLY_KINDS,
    AgentDone,
    ErrorRaised,
    Event,
    FileFrame,
    QueuedFrame,
    Record,
    SessionFrame,
    SwitchFrame,
    TextStreamed,
    ToolCalled,
    TurnCompleted,
)
from halo_actors.core.log import EVERYTHING, EventFilter, MemoryEventLog, SqliteEventLog
from halo_actors.core.log.fanout import Subscription
from halo_actors.core.log.postgres import PostgresEventLog

Log = MemoryEventLog | SqliteEventLog | PostgresEventLog
OpenLog = Callable[..., Awaitable[Log]]

BUDGET = 10.0
"""Seconds any one test may take; nothing here may hang."""


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


def texts(records: list[Record]) -> list[str]:
    return [r.event.text for r in records if isinstance(r.event, TextStreamed)]


def seqs(records: list[Record]) -> list[int]:
    return [r.seq for r in records]


async def fill(log: Log) -> list[Record]:
    """Two trees, one nested child, a root that shares a prefix with another, mixed kinds."""
    plan: list[tuple[str, Event]] = [
        ("a", text("a1")),
        ("a>x", text("ax1")),
        ("b", text("b1")),
        ("ab", text("ab1")),  # prefix trap: not in tree "a"
        ("a>x>y", ToolCalled(tool_name="shell", tool_use_id="t1")),
        ("a", ErrorRaised(error="boom")),
        ("b", TurnCompleted()),
        ("a>x", text("ax2")),
    ]
    out: list[Record] = []
    for session_id, event in plan:
        out += await log.append(session_id, event)
    return out


@asynccontextmanager
async def records_of(
    log: Log, flt: EventFilter = EVERYTHING, after_seq: int = 0, *, buffer_size: int = 4_096
) -> AsyncIterator[AsyncIterator[Record]]:
    """A subscription's iterator, closed (generator and subscription) on exit."""
    async with (
        log.subscribe(flt, after_seq, buffer_size=buffer_size) as subscription,
        aclosing(cast(AsyncGenerator[Record, None], subscription.__aiter__())) as records,
    ):
        yield records


async def take(records: AsyncIterator[Record], count: int) -> list[Record]:
    out: list[Record] = []
    while len(out) < count:
        out.append(await anext(records))
    return out


# --- numbering, timestamps, what append returns -------------------------------------------


async def test_an_empty_log_has_last_seq_zero_and_reads_nothing(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        assert event_log.last_seq == 0
        assert await event_log.read() == []


async def test_seq_strictly_increases_from_one(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        returned: list[Record] = []
        for i in range(5):
            returned += await event_log.append("s", text(f"e{i}"))
        returned += await event_log.append("s", text("m0"), text("m1"), text("m2"))
        assert seqs(returned) == list(range(1, 9))
        assert event_log.last_seq == 8
        assert seqs(await event_log.read()) == list(range(1, 9))


async def test_timestamps_are_server_ms_and_never_decrease(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        before = time.time_ns() // 1_000_000
        for i in range(20):
            await event_log.append(f"s{i % 3}", text(f"e{i}"))
        after = time.time_ns() // 1_000_000
        stored = await event_log.read()
        stamps = [r.ts for r in stored]
        assert all(before <= ts <= after for ts in stamps)
        assert stamps == sorted(stamps)


async def test_append_returns_exactly_what_read_returns(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        returned = await fill(event_log)
        returned += await event_log.append(
            "c>d",
            text("x"),
            ToolCalled(tool_name="edit", tool_use_id="t9", tool_input={"path": "a", "n": [1, 2]}),
        )
        assert await event_log.read() == returned
        assert [r.session_id for r in returned[-2:]] == ["c>d", "c>d"]


async def test_a_multi_event_append_is_contiguous_under_concurrency(event_log: Log) -> None:
    batches: list[list[Record]] = []

    async def producer(session_id: str) -> None:
        for i in range(10):
            batches.append(
                await event_log.append(
                    session_id, *(text(f"{session_id}-{i}-{k}") for k in range(3))
                )
            )

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            for p in range(5):
                nursery.start_soon(producer, f"p{p}")
        stored = {r.seq: r for r in await event_log.read()}
        assert sorted(stored) == list(range(1, 151))
        for batch in batches:
            first = batch[0].seq
            assert seqs(batch) == [first, first + 1, first + 2]
            assert len({r.ts for r in batch}) == 1
            assert [stored[r.seq] for r in batch] == batch


# --- reads ---------------------------------------------------------------------------------


async def test_read_by_session_is_exactly_that_session(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        everything = await fill(event_log)
        for session_id in ("a", "a>x", "a>x>y", "b", "ab", "nobody"):
            got = await event_log.read(EventFilter(session_id=session_id))
            assert got == [r for r in everything if r.session_id == session_id]


async def test_read_by_tree_covers_every_descendant_and_no_prefix_lookalike(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await fill(event_log)
        tree_a = await event_log.read(EventFilter(tree="a"))
        assert [r.session_id for r in tree_a] == ["a", "a>x", "a>x>y", "a", "a>x"]
        assert [r.session_id for r in await event_log.read(EventFilter(tree="ab"))] == ["ab"]


async def test_tree_and_session_reads_stay_apart_whatever_session_of_a_tree_comes_first(
    event_log: Log,
) -> None:
    with trio.fail_after(BUDGET):
        for session_id in ("r", "r", "r>c", "r", "s>c", "s", "s>c"):
            await event_log.append(session_id, AgentDone())
        for root in ("r", "s"):
            mine = await event_log.read(EventFilter(session_id=root))
            tree = await event_log.read(EventFilter(tree=root))
            assert {r.session_id for r in mine} == {root}
            assert [r.seq for r in tree] == sorted(r.seq for r in tree)
            assert {r.session_id for r in tree} == {root, f"{root}>c"}
        assert len(await event_log.read(EventFilter(session_id="r"))) == 3


@pytest.mark.parametrize("child", ["a>x", "a>x>y", "a>never_seen"])
async def test_a_tree_filter_given_a_child_normalises_to_the_root(
    event_log: Log, child: str
) -> None:
    with trio.fail_after(BUDGET):
        await fill(event_log)
        assert EventFilter(tree=child).tree == "a"
        assert await event_log.read(EventFilter(tree=child)) == await event_log.read(
            EventFilter(tree="a")
        )


RANGES = [
    (0, None, None),
    (3, None, None),
    (0, 5, None),
    (2, 6, None),
    (0, None, 2),
    (1, 7, 3),
    (4, 4, None),
    (8, None, None),
    (100, None, None),
    (0, None, 0),
    (0, None, 100),
]


@pytest.mark.parametrize(("after_seq", "until_seq", "limit"), RANGES)
async def test_read_ranges_agree_with_the_filter_model(
    event_log: Log, after_seq: int, until_seq: int | None, limit: int | None
) -> None:
    """``EventFilter.matches`` is the definition; every backend's read must agree with it."""
    filters = [
        EVERYTHING,
        EventFilter(session_id="a"),
        EventFilter(tree="a"),
        EventFilter(kinds=frozenset({"stream", "tool_call"})),
        EventFilter(tree="a", kinds=frozenset({"stream"})),
        EventFilter(session_id="a>x", tree="a"),
        EventFilter(session_id="a>x", tree="b"),
        EventFilter(kinds=frozenset()),
    ]
    with trio.fail_after(BUDGET):
        everything = await fill(event_log)
        for flt in filters:
            expected = [
                r
                for r in everything
                if flt.matches(r)
                and r.seq > after_seq
                and (until_seq is None or r.seq <= until_seq)
            ][:limit]
            got = await event_log.read(flt, after_seq=after_seq, until_seq=until_seq, limit=limit)
            assert got == expected, flt


async def test_read_since_a_timestamp_is_inclusive(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        everything: list[Record] = []
        for i in range(6):
            everything += await event_log.append(f"s{i % 2}", text(f"e{i}"))
            await trio.sleep(0.003)  # a real clock: let the server's ms timestamp move on
        stamps = sorted({r.ts for r in everything})
        assert len(stamps) > 1
        for ts in [stamps[0] - 1, *stamps, stamps[-1] + 1]:
            flt = EventFilter(since_ts=ts)
            assert await event_log.read(flt) == [r for r in everything if r.ts >= ts]
            session_flt = EventFilter(session_id="s1", since_ts=ts)
            assert await event_log.read(session_flt) == [
                r for r in everything if r.ts >= ts and r.session_id == "s1"
            ]


async def test_read_by_kinds(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        everything = await fill(event_log)
        got = await event_log.read(EventFilter(kinds=frozenset({"error", "complete"})))
        assert got == [
            r for r in everything if r.event.__struct_config__.tag in {"error", "complete"}
        ]
        assert [type(r.event) for r in got] == [ErrorRaised, TurnCompleted]
        assert await event_log.read(EventFilter(kinds=frozenset({"no_such_kind"}))) == []


async def test_every_read_is_ordered_by_seq(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await fill(event_log)
        await fill(event_log)
        for flt in (EVERYTHING, EventFilter(tree="a"), EventFilter(session_id="a>x")):
            got = seqs(await event_log.read(flt))
            assert got == sorted(got) and len(set(got)) == len(got)


# --- refusals: nothing stored, numbering unaffected ----------------------------------------


async def assert_untouched(log: Log, expected: list[Record]) -> None:
    """The failed append left no trace: same records, and the next seq follows on."""
    assert await log.read() == expected
    assert log.last_seq == len(expected)
    follow = await log.append("after", text("next"))
    assert seqs(follow) == [len(expected) + 1]


@pytest.mark.parametrize(
    "frame",
    [
        SessionFrame(session_id="a"),
        QueuedFrame(),
        SwitchFrame(session_id="b"),
        FileFrame(path="p", url="u"),
    ],
    ids=lambda f: type(f).__name__,
)
async def test_frame_only_kinds_are_refused_and_nothing_is_stored(
    event_log: Log, frame: Event
) -> None:
    with trio.fail_after(BUDGET):
        assert frame.__struct_config__.tag in FRAME_ONLY_KINDS
        stored = await event_log.append("a", text("before"))
        with pytest.raises(InvalidInput, match="never stored"):
            await event_log.append("a", frame)
        with pytest.raises(InvalidInput):
            await event_log.append("a", text("ok"), frame)  # atomic: the good one is not kept
        await assert_untouched(event_log, stored)


@pytest.mark.parametrize(
    "session_id", ["", "a b", "../etc", "a>", ">a", "a>>b", "é", None, 7, b"a"]
)
async def test_an_unsafe_session_id_is_refused_and_nothing_is_stored(
    event_log: Log, session_id: object
) -> None:
    with trio.fail_after(BUDGET):
        stored = await event_log.append("a", text("before"))
        with pytest.raises(UnsafeSessionId):
            await event_log.append(session_id, text("x"))  # type: ignore[arg-type]
        await assert_untouched(event_log, stored)


async def test_an_empty_append_is_refused(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        with pytest.raises(InvalidInput):
            await event_log.append("a")
        await assert_untouched(event_log, [])


async def test_an_event_over_the_cap_is_refused_with_no_seq_gap(open_event_log: OpenLog) -> None:
    with trio.fail_after(BUDGET):
        log = await open_event_log(max_event_bytes=200)
        async with records_of(log) as live:
            stored = await log.append("a", text("small"))
            with pytest.raises(EventTooLarge, match="cap is 200"):
                await log.append("a", text("x" * 500))
            with pytest.raises(EventTooLarge):
                await log.append("a", text("fine"), text("y" * 500))  # atomic
            assert isinstance(EventTooLarge("x"), InvalidInput)
            await assert_untouched(log, stored)
            seen = await take(live, 2)
            assert texts(seen) == ["small", "next"]
            assert seqs(seen) == [1, 2]


async def test_a_closed_log_refuses_append_read_and_subscribe(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await event_log.append("a", text("kept"))
        await event_log.aclose()
        with pytest.raises(StoreClosed):
            await event_log.append("a", text("late"))
        with pytest.raises(StoreClosed):
            await event_log.read()
        with pytest.raises(StoreClosed):
            async with event_log.subscribe():
                pass  # pragma: no cover
        await event_log.aclose()  # idempotent


# --- subscriptions ---------------------------------------------------------------------------


async def test_a_subscription_catches_up_then_follows_the_live_tail(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        for i in range(10):
            await event_log.append("a", text(f"old{i}"))
        async with records_of(event_log, after_seq=3) as live:
            caught_up = await take(live, 7)
            assert seqs(caught_up) == list(range(4, 11))
            for i in range(5):
                await event_log.append("a", text(f"new{i}"))
            assert seqs(await take(live, 5)) == list(range(11, 16))


async def test_catch_up_spans_several_storage_pages(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        for chunk in range(25):
            await event_log.append("a", *(text(f"{chunk}.{i}") for i in range(100)))
        async with records_of(event_log, after_seq=7) as live:
            got = await take(live, 2_493)
            assert seqs(got) == list(range(8, 2_501))
            await event_log.append("a", text("live"))
            assert seqs(await take(live, 1)) == [2_501]


async def test_subscribing_at_the_head_sees_only_new_records(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await fill(event_log)
        async with records_of(event_log, after_seq=event_log.last_seq) as live:
            new = await event_log.append("z", text("new"))
            assert await take(live, 1) == new


async def test_subscriptions_filter_by_session_tree_and_nothing(event_log: Log) -> None:
    filters = {
        "all": EVERYTHING,
        "session a>x": EventFilter(session_id="a>x"),
        "tree a": EventFilter(tree="a"),
        "tree via child": EventFilter(tree="a>x>y"),
        "tree ab": EventFilter(tree="ab"),
        "kinds": EventFilter(kinds=frozenset({"tool_call", "complete"})),
        "tree and kinds": EventFilter(tree="a", kinds=frozenset({"stream"})),
    }
    got: dict[str, list[Record]] = {name: [] for name in filters}

    async def subscriber(name: str, task_status: trio.TaskStatus[None]) -> None:
        async with records_of(event_log, filters[name]) as live:
            task_status.started()
            async for record in live:
                got[name].append(record)

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            for name in filters:
                await nursery.start(subscriber, name)
            everything = await fill(event_log)
            # Publishing precedes an append's return; once the subscribers block again,
            # everything published has been received.
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        for name, flt in filters.items():
            assert got[name] == [r for r in everything if flt.matches(r)], name
        assert got["all"] == everything
        assert [r.session_id for r in got["tree a"]] == ["a", "a>x", "a>x>y", "a", "a>x"]


async def test_catch_up_has_no_gap_and_no_duplicate_while_producers_race(event_log: Log) -> None:
    """Subscribers join mid-stream with a back-dated ``after_seq`` while five producers append;
    each must see exactly the matching records after its ``after_seq``, in order."""
    sessions = ["r1", "r1>c", "r2", "r1>c>d", "r3"]
    filters = [EVERYTHING, EventFilter(session_id="r1"), EventFilter(tree="r1")]
    seen: list[tuple[EventFilter, int, list[Record]]] = []

    async def subscriber(flt: EventFilter, after_seq: int) -> None:
        got: list[Record] = []
        seen.append((flt, after_seq, got))
        async with records_of(event_log, flt, after_seq) as live:
            async for record in live:
                got.append(record)
                if record.session_id == "r1" and texts([record]) == ["end"]:
                    return

    async def producer(session_id: str, subscribers: trio.Nursery) -> None:
        for i in range(60):
            (record,) = await event_log.append(session_id, text(f"{session_id}-{i}"))
            if session_id == "r1" and i % 7 == 3:
                for k, flt in enumerate(filters):
                    subscribers.start_soon(subscriber, flt, max(0, record.seq - 5 * (k + 1) * i))

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as subscribers:
            for flt in filters:
                subscribers.start_soon(subscriber, flt, 0)
            await trio.testing.wait_all_tasks_blocked()
            async with trio.open_nursery() as producers:
                for session_id in sessions:
                    producers.start_soon(producer, session_id, subscribers)
            await event_log.append("r1", text("end"))
        assert len(seen) == 3 + 3 * len(range(3, 60, 7))
        for flt, after_seq, got in seen:
            expected = await event_log.read(flt, after_seq=after_seq)
            assert seqs(got) == seqs(expected), (flt, after_seq)
            assert got == expected


async def test_fan_out_happens_only_after_commit(event_log: Log) -> None:
    """Whatever a subscriber receives, it can read back at once: it was committed first."""
    checked: list[int] = []

    async def producer(session_id: str) -> None:
        for i in range(40):
            await event_log.append(session_id, text(f"{i}"))

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:

            async def subscriber(task_status: trio.TaskStatus[None]) -> None:
                async with records_of(event_log) as live:
                    task_status.started()
                    async for record in live:
                        stored = await event_log.read(
                            after_seq=record.seq - 1, until_seq=record.seq
                        )
                        assert stored == [record]
                        checked.append(record.seq)
                        if record.seq == 200:
                            return

            await nursery.start(subscriber)
            for p in range(5):
                nursery.start_soon(producer, f"p{p}")
        assert checked == list(range(1, 201))


async def test_a_slow_subscriber_overflows_after_a_gap_free_prefix_and_can_resume(
    event_log: Log,
) -> None:
    with trio.fail_after(BUDGET):
        async with records_of(event_log, buffer_size=4) as slow:
            for i in range(50):
                await event_log.append(f"s{i % 3}", text(f"e{i}"))
            prefix: list[Record] = []
            with pytest.raises(SubscriptionOverflow) as overflow:
                async for record in slow:
                    prefix.append(record)
            assert seqs(prefix) == [1, 2, 3, 4]
            assert overflow.value.resume_after == 4
            assert isinstance(overflow.value, SubscriptionClosed)
            assert event_log.subscriber_count == 0
        async with records_of(event_log, after_seq=overflow.value.resume_after) as resumed:
            rest = await take(resumed, 46)
        assert prefix + rest == await event_log.read()


async def test_an_overflow_mid_stream_keeps_what_was_read(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await event_log.append("a", text("first"))
        async with records_of(event_log, buffer_size=4) as slow:
            assert seqs(await take(slow, 1)) == [1]
            for i in range(10):
                await event_log.append("a", text(f"e{i}"))
            with pytest.raises(SubscriptionOverflow) as overflow:
                await take(slow, 100)
            assert overflow.value.resume_after == 5
        async with records_of(event_log, after_seq=5) as resumed:
            assert seqs(await take(resumed, 6)) == list(range(6, 12))


async def test_closing_the_log_ends_live_subscriptions(event_log: Log) -> None:
    filters = (EVERYTHING, EventFilter(session_id="a"), EventFilter(tree="a"))
    outcome: dict[EventFilter, tuple[list[int], SubscriptionClosed]] = {}

    async def subscriber(flt: EventFilter, task_status: trio.TaskStatus[None]) -> None:
        got: list[int] = []
        async with records_of(event_log, flt) as live:
            task_status.started()
            with pytest.raises(SubscriptionClosed) as ended:
                async for record in live:
                    got.append(record.seq)
        outcome[flt] = (got, ended.value)

    with trio.fail_after(BUDGET):
        await event_log.append("a", text("one"))
        async with trio.open_nursery() as nursery:
            for flt in filters:
                await nursery.start(subscriber, flt)
            await event_log.append("a>b", text("two"))
            await trio.testing.wait_all_tasks_blocked()
            await event_log.aclose()
        assert [outcome[flt][0] for flt in filters] == [[1, 2], [1], [1, 2]]
        for flt in filters:
            got, ended = outcome[flt]
            assert type(ended) is SubscriptionClosed
            assert ended.resume_after == got[-1]


async def test_closing_the_log_mid_catch_up_ends_with_subscription_closed(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        await event_log.append("a", *(text(f"e{i}") for i in range(5)))
        async with records_of(event_log, after_seq=2) as behind:
            await event_log.aclose()
            with pytest.raises(SubscriptionClosed) as ended:
                await anext(behind)
        assert ended.value.resume_after == 2


async def test_leaving_a_subscription_unregisters_it(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        async with event_log.subscribe(EventFilter(session_id="a")) as subscription:
            assert isinstance(subscription, Subscription)
            assert event_log.subscriber_count == 1
        assert event_log.subscriber_count == 0
        await event_log.append("a", text("nobody listens"))


# --- cancellation ----------------------------------------------------------------------------


async def test_an_append_under_a_cancelled_scope_still_stores_and_returns(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        with trio.CancelScope() as scope:
            scope.cancel()
            records = await event_log.append("a", text("cancelled?"), text("no"))
            assert texts(records) == ["cancelled?", "no"]
        assert await event_log.read() == records


async def test_appends_cancelled_while_committing_are_stored_iff_returned(event_log: Log) -> None:
    """Cancel a crowd of appenders the moment the last one has queued its append:
    some are still waiting for their commit, and none may raise Cancelled after storing."""
    crowd = 50
    started = 0
    all_started = trio.Event()
    returned: list[str] = []

    async def appender(label: str) -> None:
        nonlocal started
        started += 1
        if started == crowd:
            all_started.set()
        # append validates, stamps and queues before its first checkpoint, so once every
        # appender has run this far, every append is queued and none may be lost.
        await event_log.append("a", text(label), text(label + "+"))
        returned.extend([label, label + "+"])  # no checkpoint between the return and this

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            for i in range(crowd):
                nursery.start_soon(appender, f"c{i}")
            await all_started.wait()
            nursery.cancel_scope.cancel()
        stored = texts(await event_log.read())
        assert sorted(stored) == sorted(returned)
        assert len(stored) == 2 * crowd
        assert seqs(await event_log.read()) == list(range(1, len(stored) + 1))
        follow = await event_log.append("a", text("after"))
        assert follow[0].seq == len(stored) + 1


HUGE = 10**30
"""Past any 64-bit integer: SQLite cannot even bind it."""


async def test_bounds_past_any_seq_or_time_read_as_their_edge(event_log: Log) -> None:
    with trio.fail_after(BUDGET):
        stored = await event_log.append("a", text("one"), text("two"))
        assert await event_log.read(after_seq=HUGE) == []
        assert await event_log.read(after_seq=-HUGE, until_seq=HUGE, limit=HUGE) == stored
        assert await event_log.read(EventFilter(since_ts=HUGE)) == []
        async with event_log.subscribe(after_seq=-HUGE) as subscription:
            got = []
            async for record in subscription:
                got.append(record)
                if len(got) == 2:
                    break
        assert got == stored
