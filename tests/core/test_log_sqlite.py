"""What only the SQLite backend promises: a file that outlives the process, WAL,
the configured ``synchronous`` level, and group commit. The shared contract is in
``test_log_contract.py``."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest
import trio

from halo_actors.core.errors import StoreClosed
from halo_actors.core.events import Notified, Record, TextStreamed, encode_record, kind_of
from halo_actors.core.ids import root_of
from halo_actors.core.log import EventFilter, SqliteEventLog
from halo_actors.core.log import sqlite as sqlite_log
from halo_actors.core.log.filter import EVERYTHING
from halo_actors.core.log.journal import journal_path
from halo_actors.core.log.sqlite import Synchronous

BUDGET = 10.0


def text(label: str) -> TextStreamed:
    return TextStreamed(text=label)


def labels(records: list[Record]) -> list[str]:
    return [r.event.text for r in records if isinstance(r.event, TextStreamed)]


def db_path(tmp_path: Path) -> Path:
    return tmp_path / "workspace" / ".halo" / "events.db"


async def test_open_creates_the_halo_directory_and_file(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            assert db_path(tmp_path).is_file()
            assert log.last_seq == 0
        finally:
            await log.aclose()


async def test_reopening_keeps_records_and_continues_numbering(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        first = await log.append("a", text("one"), text("two"))
        first += await log.append("a>b", text("three"))
        await log.aclose()

        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            assert log.last_seq == 3
            assert await log.read() == first
            assert await log.read(EventFilter(tree="a>b")) == first
            (later,) = await log.append("a", text("four"))
            assert later.seq == 4
            assert later.ts >= first[-1].ts
        finally:
            await log.aclose()


async def test_a_reopened_log_serves_catch_up_from_the_file(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        for i in range(5):
            await log.append("a", text(f"old{i}"))
        await log.aclose()
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            async with log.subscribe(after_seq=2) as subscription:
                live = subscription.__aiter__()
                got = [await anext(live) for _ in range(3)]
                await log.append("a", text("new"))
                got.append(await anext(live))
            assert [r.seq for r in got] == [3, 4, 5, 6]
            assert labels(got) == ["old2", "old3", "old4", "new"]
        finally:
            await log.aclose()


async def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            await log.append("a", text("x"))
            with sqlite3.connect(db_path(tmp_path)) as other:  # WAL is a property of the file
                (mode,) = other.execute("PRAGMA journal_mode").fetchone()
            assert mode == "wal"
        finally:
            await log.aclose()


@pytest.mark.parametrize(("level", "value"), [("OFF", 0), ("NORMAL", 1), ("FULL", 2), ("EXTRA", 3)])
async def test_the_synchronous_level_is_applied(
    tmp_path: Path, level: Synchronous, value: int
) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path), synchronous=level)
        try:
            # ``synchronous`` is per connection, so only the log's own connections can
            # show it; both are made by the same helper, so the reader speaks for the writer.
            reader = log._reader
            assert reader is not None
            (applied,) = reader.execute("PRAGMA synchronous").fetchone()
            assert applied == value
        finally:
            await log.aclose()


async def test_the_default_synchronous_level_is_normal(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            assert log._reader is not None
            assert log._reader.execute("PRAGMA synchronous").fetchone() == (1,)
        finally:
            await log.aclose()


async def test_concurrent_appends_are_group_committed(tmp_path: Path) -> None:
    appends = 0

    async def producer(p: int) -> None:
        nonlocal appends
        for i in range(10):
            await log.append(f"p{p}", text(f"{p}.{i}"))
            appends += 1

    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            async with trio.open_nursery() as nursery:
                for p in range(20):
                    nursery.start_soon(producer, p)
            assert appends == 200
            assert [r.seq for r in await log.read()] == list(range(1, 201))
            assert 0 < log.commits < appends
        finally:
            await log.aclose()


async def test_the_appends_of_one_scheduler_pass_and_the_next_share_one_commit(
    tmp_path: Path,
) -> None:
    """Rule (group commit): what is stamped in one scheduler pass reaches the writer
    together, one pass later than it was stamped: an append and the records of a task
    it wakes (a message and the turn it starts) are one commit, not two."""

    async def woken(log: SqliteEventLog) -> None:  # runs in the pass after the first append
        log.append_nowait("b", text("b1"), text("b2"))

    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            before = log.commits
            async with trio.open_nursery() as nursery:
                log.append_nowait("a", text("a1"))
                nursery.start_soon(woken, log)
                log.append_nowait("c", text("c1"))
            await log.wait_durable(log.stamped_seq)
            assert log.commits - before == 1
            assert labels(await log.read()) == ["a1", "c1", "b1", "b2"]
        finally:
            await log.aclose()


async def test_a_producer_done_with_a_group_of_its_own_records_alone_flushes_it_at_once(
    tmp_path: Path,
) -> None:
    """Rule (``flush_alone``): a group holding one session's records alone is taken out of
    the pass's group commit when that session says it is done (its run ended): what is
    stamped after it in the pass is another commit. A group holding anyone else's records
    stays whole: one commit, as without the hint."""
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            before = log.commits
            log.append_nowait("a", text("a1"))
            log.append_nowait("b", text("b1"))
            log.flush_alone("a")  # b's records are in the group too: nothing happens
            log.flush_alone("b")
            log.append_nowait("a", text("a2"))
            await log.wait_durable(log.stamped_seq)
            assert log.commits - before == 1

            async def done_with_a() -> None:  # in the pass the flusher only waits through
                log.flush_alone("a")  # a's alone, and waited for: committed right here
                log.append_nowait("b", text("b2"))

            before = log.commits
            (_, a4) = log.append_nowait("a", text("a3"), text("a4"))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(done_with_a)
                await log.wait_durable(a4.seq)
            await log.wait_durable(log.stamped_seq)
            assert log.commits - before == 2
            assert labels(await log.read()) == ["a1", "b1", "a2", "a3", "a4", "b2"]
        finally:
            await log.aclose()


async def test_a_commit_is_one_journal_write_and_sqlite_indexes_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule (journal): a flushed group is durable, and published, once one frame of it is
    written to the journal; SQLite indexes it behind, ``INDEX_BATCH`` records at a time,
    on the trio thread (a burst past ``INLINE_INDEX_MAX`` on the writer thread). Reads
    see every published record wherever it is. Index commits count toward the WAL
    checkpoints."""
    monkeypatch.setattr(sqlite_log, "CHECKPOINT_PAGES", 5)
    monkeypatch.setattr(sqlite_log, "INDEX_BATCH", 30)
    monkeypatch.setattr(sqlite_log, "INLINE_INDEX_MAX", 40)
    db = db_path(tmp_path)
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db)
        try:
            while log._conn is None:  # noqa: ASYNC110 - the writer thread connects on its own
                await trio.sleep(0.001)  # (before, groups go to it unjournaled)
            await log.append("a", text("a"))
            before = log.commits
            for i in range(10):
                await log.append("a", text(f"a{i}"))
            assert log.commits - before == 10
            assert log.index_commits == 0 and stored_rows(db) == 0  # all in the journal
            assert labels(await log.read()) == ["a", *(f"a{i}" for i in range(10))]
            for i in range(30):  # past INDEX_BATCH: indexed right there, on the trio thread
                await log.append("a", text(f"b{i}"))
            assert log.inline_commits == log.index_commits == 1
            assert stored_rows(db) == 30  # the first INDEX_BATCH; the rest wait
            burst = log.append_nowait("b", *(text(f"c{i}") for i in range(60)))
            await log.wait_durable(burst[-1].seq)  # one frame, too big to index here
            assert await log.wait_indexed()
            assert log.inline_commits == 1 and log.index_commits == 2
            while log.checkpoints == 0:  # noqa: ASYNC110 - the checkpointer's own thread
                await trio.sleep(0.001)
            assert [r.seq for r in await log.read()] == list(range(1, 102))
        finally:
            await log.aclose()


async def test_the_journal_is_cut_once_all_of_it_is_indexed_and_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule (journal cut): a journal that reached ``JOURNAL_CUT_BYTES`` takes no more
    frames; the next groups go to SQLite unjournaled (published once committed), behind
    what the journal holds; once all of it is indexed and the WAL synced, the journal is
    emptied and frames resume. Nothing is lost or reordered across a cut, and it never
    holds more than its limit and one frame."""
    monkeypatch.setattr(sqlite_log, "JOURNAL_CUT_BYTES", 4_096)
    monkeypatch.setattr(sqlite_log, "INDEX_BATCH", 5)
    db = db_path(tmp_path)
    journal = journal_path(db)
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db)
        try:
            await log.append("a", text("first"))  # the writer thread is up after this
            sizes, cuts = [], 0
            for i in range(100):
                await log.append("a", text(f"{i}:" + "x" * 400))
                sizes.append(journal.stat().st_size)
                cuts += len(sizes) > 1 and sizes[-1] < sizes[-2]
            assert cuts >= 5 and max(sizes) < 4_096 + 1_024
            assert log.commits > log.index_commits > 0
            assert labels(await log.read())[1:] == [f"{i}:" + "x" * 400 for i in range(100)]
        finally:
            await log.aclose()
        assert journal.stat().st_size == 0  # a clean close indexes and cuts it
        log = await SqliteEventLog.open(db)
        try:
            assert [r.seq for r in await log.read()] == list(range(1, 102))
        finally:
            await log.aclose()


def stored_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0])


async def test_close_commits_every_append_it_accepted(tmp_path: Path) -> None:
    """Appends racing ``aclose``: each either raises StoreClosed or is durable."""
    returned: list[str] = []
    refused: list[str] = []
    going = trio.Event()

    async def producer(p: int) -> None:
        for i in range(1_000):
            label = f"{p}.{i}"
            try:
                await log.append("a", text(label))
            except StoreClosed:
                refused.append(label)
                return
            returned.append(label)
            if len(returned) >= 8:
                going.set()

    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        async with trio.open_nursery() as nursery:
            for p in range(8):
                nursery.start_soon(producer, p)
            await going.wait()  # every producer is appending, none is near its end
            await log.aclose()
        assert len(refused) == 8
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            stored = await log.read()
            assert sorted(labels(stored)) == sorted(returned)
            assert [r.seq for r in stored] == list(range(1, len(stored) + 1))
        finally:
            await log.aclose()


async def test_two_files_are_two_independent_logs(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        one = await SqliteEventLog.open(tmp_path / "one" / "events.db")
        two = await SqliteEventLog.open(tmp_path / "two" / "events.db")
        try:
            await one.append("a", text("in one"))
            (record,) = await two.append("a", text("in two"))
            assert record.seq == 1
            assert labels(await one.read()) == ["in one"]
        finally:
            await one.aclose()
            await two.aclose()


def indexes(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        return {name for (name,) in rows}


async def test_a_read_since_a_time_finds_its_first_record_by_seq_without_a_ts_index(
    tmp_path: Path,
) -> None:
    """ts never decreases along seq, so ``since_ts`` is answered by a binary search over
    seq: right with runs of equal stamps, with a batch whose records straddle a stamp, and
    with holes in seq (rows gone by hand)."""
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            for burst in range(12):
                for i in range(burst % 4 + 1):
                    log.append_nowait(f"s{i % 2}", text(f"{burst}.{i}"))
                if burst % 5 == 0:  # one batch of s1 whose records carry two stamps
                    log.append_nowait("s1", text(f"{burst}.early"))
                    stamp = time.time_ns() // 1_000_000
                    while time.time_ns() // 1_000_000 <= stamp:  # the next ms, in this pass
                        pass
                    log.append_nowait("s1", text(f"{burst}.late"))
                await log.wait_durable(log.stamped_seq)
                await trio.sleep(0.002)  # the next burst gets a later ms stamp
        finally:
            await log.aclose()
        assert not {name for name in indexes(db_path(tmp_path)) if name.endswith("_ts")}
        with sqlite3.connect(db_path(tmp_path)) as conn:
            conn.execute("DELETE FROM batches WHERE seq IN (2, 3, 9, 10, 11, 20)")
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            everything = await log.read()
            stamps = sorted({r.ts for r in everything})
            assert len(stamps) > 4
            for ts in [0, stamps[0] - 1, *stamps, stamps[-1] + 1, 2**70]:
                for flt in (EventFilter(since_ts=ts), EventFilter(session_id="s1", since_ts=ts)):
                    want = [r for r in everything if flt.matches(r)]
                    assert await log.read(flt) == want, ts
                    assert await log.read(flt, after_seq=15) == [r for r in want if r.seq > 15]
                    assert await log.read(flt, limit=2) == want[:2]
        finally:
            await log.aclose()


async def test_a_sessions_appends_of_one_pass_are_one_row_and_reads_cut_rows_anywhere(
    tmp_path: Path,
) -> None:
    """One row a batch: the appends of one session with no other session's between, in
    one scheduler pass, at most ``BATCH_MAX_RECORDS`` records a row (a longer append is
    split). Every read bound (``after_seq``, ``until_seq``, ``limit``, kinds) may fall
    inside a row: the reads answer as if each record were a row of its own, whether the
    records are only in the journal, indexed in SQLite, or some of each."""
    cap = sqlite_log.BATCH_MAX_RECORDS
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            stamped = log.append_nowait("s1", text("a"), text("b"))
            stamped += log.append_nowait("s1", Notified(text="c"), text("d"))  # the same batch
            stamped += log.append_nowait("s1>x", text("e"))  # another session: its own row
            stamped += log.append_nowait("s1", *(text(f"long{i}") for i in range(cap + 5)))
            stamped += log.append_nowait("s1", text("f"))  # joins the short second row
            await log.wait_durable(log.stamped_seq)
            stamped += log.append_nowait("s1", text("g"))  # the next pass: a row of its own
            await log.wait_durable(log.stamped_seq)
            await check_reads(log, stamped, cap)  # all of them in the journal only
            assert await log.wait_indexed()
            with sqlite3.connect(db_path(tmp_path)) as conn:
                rows = conn.execute("SELECT first_seq, seq, session_id FROM batches").fetchall()
            assert rows == [
                (1, 4, "s1"),
                (5, 5, "s1>x"),
                (6, 5 + cap, "s1"),
                (6 + cap, 11 + cap, "s1"),
                (12 + cap, 12 + cap, "s1"),
            ]
            await check_reads(log, stamped, cap)  # all of them in SQLite
            stamped += log.append_nowait("s1", text("h"), Notified(text="i"))
            stamped += log.append_nowait("s1>x", text("j"))
            await log.wait_durable(log.stamped_seq)
            await check_reads(log, stamped, cap)  # some in SQLite, the rest in the journal
            beside = await SqliteEventLog.open(db_path(tmp_path), read_only=True)
            try:  # another process's view: the file's journal read beside SQLite
                assert beside.last_seq == log.last_seq
                await check_reads(beside, stamped, cap)
            finally:
                await beside.aclose()
        finally:
            await log.aclose()


async def check_reads(log: SqliteEventLog, stamped: list[Record], cap: int) -> None:
    """Every read of ``log`` answers as ``stamped`` (everything appended) filtered."""
    assert await log.read() == stamped
    filters = (
        EVERYTHING,
        EventFilter(session_id="s1"),
        EventFilter(tree="s1"),
        EventFilter(session_id="s1", kinds=frozenset({"notification"})),
        EventFilter(kinds=frozenset({"stream"})),
    )
    for flt in filters:
        want = [r for r in stamped if flt.matches(r)]
        for after in (0, 1, 3, 4, 5, 6, 30, cap + 7, cap + 12):
            for until in (None, 2, 4, 7, cap + 6, cap + 11, cap + 13):
                got = await log.read(flt, after_seq=after, until_seq=until)
                assert got == [
                    r for r in want if r.seq > after and (until is None or r.seq <= until)
                ], (flt, after, until)
            for limit in (0, 1, 3, cap + 1):
                got = await log.read(flt, after_seq=after, limit=limit)
                assert got == [r for r in want if r.seq > after][:limit], (flt, limit)
    assert log.read_session_sync("s1") == [r for r in stamped if r.session_id == "s1"]


TREE_SESSIONS = ("t1", "t1>a", "t1>a>x", "t2", "t1>b", "t2>c")


async def append_interleaved(log: SqliteEventLog, rounds: int) -> None:
    """Records of two trees, roots and descendants interleaved, over several commits."""
    for n in range(rounds):
        for sid in TREE_SESSIONS:
            log.append_nowait(sid, text(f"{sid}:{n}"))
        await log.wait_durable(log.stamped_seq)


async def test_a_roots_records_are_indexed_once_by_session_and_trees_read_whole_in_order(
    tmp_path: Path,
) -> None:
    """The index by tree leaves out every root's own rows (``session_id != root``): a
    root's commit writes the table and one index, not two. A tree read merges the root's
    rows (by session) with its descendants' (by tree): every record, in seq order, with
    ``after_seq``, ``until_seq``, ``limit``, ``kinds`` and ``since_ts`` as for any read."""
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            await append_interleaved(log, 5)
            everything = await log.read()
            assert len(everything) == 5 * len(TREE_SESSIONS)
            for flt in (
                EventFilter(tree="t1"),
                EventFilter(tree="t1>a"),  # any member names its tree
                EventFilter(tree="t2", kinds=frozenset({"stream"})),
                EventFilter(tree="t1", kinds=frozenset({"user"})),
                EventFilter(tree="t1", since_ts=everything[7].ts),
                EventFilter(session_id="t1", tree="t1"),
                EventFilter(session_id="t1>a", tree="t2"),
            ):
                want = [r for r in everything if flt.matches(r)]
                assert await log.read(flt) == want, flt
                assert await log.read(flt, after_seq=8, until_seq=25) == [
                    r for r in want if 8 < r.seq <= 25
                ], flt
                assert (
                    await log.read(flt, after_seq=3, limit=4) == [r for r in want if r.seq > 3][:4]
                ), flt
        finally:
            await log.aclose()
        with sqlite3.connect(db_path(tmp_path)) as conn:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'batches_below_roots'"
            ).fetchone()
            assert sql.endswith("WHERE session_id != root"), sql
            tree_sql, tree_params = sqlite_log._select(EventFilter(tree="t1"), 0, None, 10)
            plan = conn.execute("EXPLAIN QUERY PLAN " + tree_sql, tree_params).fetchall()
            details = " | ".join(row[-1] for row in plan)
            assert "MERGE (UNION ALL)" in details and "TEMP B-TREE" not in details, details


OLD_SCHEMA = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, root TEXT NOT NULL,
    ts INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, seq);
CREATE INDEX events_by_root ON events (root, seq);
CREATE INDEX events_by_ts ON events (ts);
"""
"""The file of a release from before batches: one record a row (and two indexes later
releases dropped)."""


def write_old_file(db: Path, records: list[Record]) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    r.seq,
                    r.session_id,
                    root_of(r.session_id),
                    r.ts,
                    kind_of(r.event),
                    encode_record(r),
                )
                for r in records
            ],
        )


async def test_a_file_from_before_batches_is_read_as_it_is_and_moved_into_batches_on_open(
    tmp_path: Path,
) -> None:
    """Opened read-only, a file of one record a row is read through a view (nothing is
    written); opened for writing, its rows become batches of one, once, and the log goes on
    from its last seq. Every read, and the session index, answer the same throughout."""
    with trio.fail_after(BUDGET):
        source = await SqliteEventLog.open(tmp_path / "source.db")
        try:
            await append_interleaved(source, 3)
            source.append_nowait("t1", Notified(text="u"), text("v"))
            await source.wait_durable(source.stamped_seq)
            everything = await source.read()
        finally:
            await source.aclose()
        db = db_path(tmp_path)
        write_old_file(db, everything)
        reads = (
            EVERYTHING,
            EventFilter(tree="t1"),
            EventFilter(session_id="t1>a"),
            EventFilter(tree="t1", kinds=frozenset({"notification"})),
            EventFilter(since_ts=everything[5].ts),
        )

        async def check(log: SqliteEventLog) -> None:
            for flt in reads:
                want = [r for r in everything if flt.matches(r)]
                assert await log.read(flt) == want, flt
                assert (
                    await log.read(flt, after_seq=4, limit=3) == [r for r in want if r.seq > 4][:3]
                ), flt
            assert log.read_session_sync("t1") == [r for r in everything if r.session_id == "t1"]
            summaries = {s.session_id: s.last_seq for s in await log.session_index()}
            assert summaries == {
                sid: max(r.seq for r in everything if r.session_id == sid)
                for sid in {r.session_id for r in everything}
            }

        log = await SqliteEventLog.open(db, read_only=True)
        try:
            await check(log)
        finally:
            await log.aclose()
        assert {"events_by_root", "events_by_ts"} <= indexes(db)  # read-only wrote nothing
        log = await SqliteEventLog.open(db)
        try:
            await check(log)
            (later,) = await log.append("t2", text("after"))
            assert later.seq == everything[-1].seq + 1
        finally:
            await log.aclose()
        with sqlite3.connect(db) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "events" not in tables and "events_by_ts" not in tables
        assert {"batches", "batches_by_session", "batches_below_roots"} <= tables
        log = await SqliteEventLog.open(db, read_only=True)
        try:
            assert await log.read() == [*everything, later]
        finally:
            await log.aclose()


async def test_a_commit_of_more_rows_than_one_insert_takes_stores_them_all_in_order(
    tmp_path: Path,
) -> None:
    rows = 2 * sqlite_log.INSERT_ROWS + 11  # two whole statements and a shorter one
    with trio.fail_after(BUDGET):
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            commits = log.commits
            for i in range(rows):  # two sessions in turn: a row each
                log.append_nowait(f"s{i % 2}", text(f"{i}"))
            await log.wait_durable(log.stamped_seq)
            assert log.commits == commits + 1
        finally:
            await log.aclose()
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            stored = await log.read()
            assert labels(stored) == [f"{i}" for i in range(rows)]
            assert [r.seq for r in stored] == list(range(1, rows + 1))
        finally:
            await log.aclose()


UNCLOSED = """
import sys, trio
from halo_actors.core.events import TextStreamed
from halo_actors.core.log import SqliteEventLog

async def main():
    log = await SqliteEventLog.open(sys.argv[1])
    await log.append("s1", TextStreamed(text="kept"))
    log.append_nowait("s1", TextStreamed(text="never waited for"))
    print("appended", flush=True)  # and returns without closing the log

trio.run(main)
"""


async def test_a_program_that_never_closes_its_log_still_exits_and_keeps_what_was_durable(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BUDGET):
        done = await trio.run_process(
            [sys.executable, "-c", UNCLOSED, str(db_path(tmp_path))],
            capture_stdout=True,
            capture_stderr=True,
        )
        assert done.stdout == b"appended\n", done.stderr
        assert b"event_log_writer_stopped" not in done.stderr
        log = await SqliteEventLog.open(db_path(tmp_path))
        try:
            assert labels(await log.read())[0] == "kept"
        finally:
            await log.aclose()
