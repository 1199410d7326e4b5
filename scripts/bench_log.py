"""Event-log benchmark: our log against raw ``sqlite3``, measured in the same run.

Usage: ``python scripts/bench_log.py [--quick]``

(a) append: ``SqliteEventLog`` (WAL, synchronous=NORMAL), concurrent producers each
    appending single events, against raw ``sqlite3`` inserting the very records our log
    stored (same encoded bodies, same pragmas), one row a record as a plain program
    stores events (``RAW_SCHEMA``: our log stores a batch a row), at 100 rows per commit;
    (a') the same producers pipelined: ``append_nowait`` and one checkpoint per event,
    ``wait_durable`` at the end (how the runtime appends), against the same raw rate;
(b) replay: ``read()`` of every record of one tree against a raw
    ``SELECT body … ORDER BY seq`` of the same records in the raw file (a row each,
    fetchall, no decoding);
(c) fan-out: live subscribers, each filtered to one session, while producers append
    at a paced rate; latency is from the moment an append is issued to the moment a
    subscriber receives that record.

Human-readable lines first; the last line is one JSON object. Timing here is
informative only: it never gates a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from halo_actors.core.events import TextStreamed, decode_records, encode_record, kind_of
from halo_actors.core.ids import root_of
from halo_actors.core.log import EventFilter, MemoryEventLog, SqliteEventLog

Row = tuple[int, str, str, int, str, bytes]
RAW_SCHEMA = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, root TEXT NOT NULL,
    ts INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, seq);
CREATE INDEX events_below_roots ON events (root, seq) WHERE session_id != root;
"""
"""The baseline's table: one row a record, indexed as ours is (by session; by tree below
the roots)."""
RAW_INSERT = "INSERT INTO events (seq, session_id, root, ts, kind, body) VALUES (?, ?, ?, ?, ?, ?)"
"""The baseline inserts the way a plain ``sqlite3`` program does: ``executemany``."""
TARGETS = {"append_ratio": 0.5, "replay_ratio": 0.5, "fanout_p99_ms": 20.0}


@dataclass(frozen=True)
class Config:
    producers: int = 10
    events: int = 20_000
    raw_rows_per_commit: int = 100
    repeats: int = 3
    replay_repeats: int = 7
    subscribers: int = 1_000
    rate: int = 10_000
    seconds: float = 1.5
    fanout_producers: int = 20
    sustainable_rate: int = 3_000
    pipelined_fanout: bool = False
    """Fan-out producers use ``append_nowait`` (how the runtime appends) instead of ``append``."""


def say(line: str) -> None:
    print(line, flush=True)


def payload(i: int) -> TextStreamed:
    """A streamed text delta of typical size (~80 bytes of text)."""
    return TextStreamed(text=f"delta {i:07d} " + "lorem ipsum dolor sit amet " * 3)


def session_of(producer: int) -> str:
    return f"bench_tree{producer % 2}>worker{producer}"


# --- (a) append ----------------------------------------------------------------------------


async def ours_append(db: Path, cfg: Config) -> float:
    """Events per second through ``SqliteEventLog.append`` (single events, concurrent)."""
    log = await SqliteEventLog.open(db, synchronous="NORMAL")
    per_producer = cfg.events // cfg.producers

    async def producer(p: int) -> None:
        session_id = session_of(p)
        for i in range(per_producer):
            await log.append(session_id, payload(i))

    try:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for p in range(cfg.producers):
                nursery.start_soon(producer, p)
        elapsed = time.perf_counter() - start
        say(f"    ours: {cfg.events} appends in {elapsed:.3f}s, {log.commits} commits")
    finally:
        await log.aclose()
    return cfg.events / elapsed


async def ours_append_pipelined(db: Path, cfg: Config) -> tuple[float, int]:
    """Events per second, durable, when each producer appends with ``append_nowait`` (one
    checkpoint between two, as a session streaming) and waits for durability at its end:
    how the runtime appends. Returns the rate and the commits it took."""
    log = await SqliteEventLog.open(db, synchronous="NORMAL")
    per_producer = cfg.events // cfg.producers

    async def producer(p: int) -> None:
        session_id = session_of(p)
        last = 0
        for i in range(per_producer):
            (record,) = log.append_nowait(session_id, payload(i))
            last = record.seq
            await trio.lowlevel.checkpoint()
        await log.wait_durable(last)

    try:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for p in range(cfg.producers):
                nursery.start_soon(producer, p)
        elapsed = time.perf_counter() - start
        commits = log.commits
    finally:
        await log.aclose()
    return cfg.events / elapsed, commits


def stored_rows(db: Path) -> list[Row]:
    """The records our log stored in ``db``, a row each, as the baseline inserts them."""
    with sqlite3.connect(db) as conn:
        batches = conn.execute("SELECT body FROM batches ORDER BY seq")
        records = [record for (body,) in batches for record in decode_records(body)]
    return [
        (r.seq, r.session_id, root_of(r.session_id), r.ts, kind_of(r.event), encode_record(r))
        for r in records
    ]


def raw_append(db: Path, rows: list[Row], per_commit: int) -> float:
    """Rows per second through plain ``sqlite3`` with the same pragmas, ``per_commit`` a commit."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(RAW_SCHEMA)
        start = time.perf_counter()
        for i in range(0, len(rows), per_commit):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(RAW_INSERT, rows[i : i + per_commit])
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return len(rows) / elapsed


# --- (b) replay ----------------------------------------------------------------------------


async def ours_replay(db: Path, tree: str) -> tuple[float, int]:
    log = await SqliteEventLog.open(db)
    try:
        await log.read(EventFilter(tree=tree), limit=1)  # warm the page cache alike
        start = time.perf_counter()
        records = await log.read(EventFilter(tree=tree))
        elapsed = time.perf_counter() - start
    finally:
        await log.aclose()
    return len(records) / elapsed, len(records)


def raw_replay(db: Path, tree: str) -> tuple[float, int]:
    conn = sqlite3.connect(db)
    try:
        # the root's rows by session, its descendants' by the partial index, merged
        sql = (
            "SELECT seq, body FROM events WHERE session_id = ?1 UNION ALL "
            "SELECT seq, body FROM events WHERE root = ?1 AND session_id != root ORDER BY seq"
        )
        conn.execute(sql + " LIMIT 1", (tree,)).fetchall()
        start = time.perf_counter()
        bodies = conn.execute(sql, (tree,)).fetchall()
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return len(bodies) / elapsed, len(bodies)


# --- (c) fan-out ---------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(0, min(len(sorted_values) - 1, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


async def fanout(log: MemoryEventLog | SqliteEventLog, cfg: Config) -> dict[str, float]:
    sessions = [f"fan_tree{i % 10}>s{i}" for i in range(cfg.subscribers)]
    total = int(cfg.rate * cfg.seconds)
    issued: dict[int, float] = {}
    scheduled_lag: list[float] = []
    received: list[tuple[int, float]] = []
    all_received = trio.Event()

    async def subscriber(session_id: str, task_status: trio.TaskStatus[None]) -> None:
        async with log.subscribe(EventFilter(session_id=session_id)) as subscription:
            task_status.started()
            async for record in subscription:
                received.append((record.seq, time.perf_counter()))
                if len(received) == total:
                    all_received.set()

    async def producer(p: int, t0: float) -> None:
        for i in range(p, total, cfg.fanout_producers):
            due = t0 + i / cfg.rate
            if trio.current_time() < due:  # behind schedule: catch up without a timer
                await trio.sleep_until(due)
            scheduled_lag.append(trio.current_time() - due)
            issue = time.perf_counter()
            if cfg.pipelined_fanout:  # how the runtime appends: no wait for the commit
                (record,) = log.append_nowait(sessions[i % cfg.subscribers], payload(i))
                await trio.lowlevel.checkpoint()
            else:
                (record,) = await log.append(sessions[i % cfg.subscribers], payload(i))
            issued[record.seq] = issue

    async with trio.open_nursery() as nursery:
        for session_id in sessions:
            await nursery.start(subscriber, session_id)
        t0 = trio.current_time() + 0.05
        wall0 = time.perf_counter()
        async with trio.open_nursery() as producers:
            for p in range(cfg.fanout_producers):
                producers.start_soon(producer, p, t0)
        producing = time.perf_counter() - wall0 - 0.05
        with trio.move_on_after(10):
            await all_received.wait()
        nursery.cancel_scope.cancel()

    latencies = sorted((t - issued[seq]) * 1_000 for seq, t in received)
    lags = sorted(lag * 1_000 for lag in scheduled_lag)
    return {
        "events": total,
        "deliveries": len(received),
        "achieved_rate": total / producing,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1],
        "schedule_lag_p99_ms": percentile(lags, 0.99),
    }


async def fanout_on(backend: str, tmp: Path, cfg: Config) -> dict[str, float]:
    log: MemoryEventLog | SqliteEventLog
    if backend == "memory":
        log = MemoryEventLog()
    else:
        log = await SqliteEventLog.open(tmp / f"fanout{time.time_ns()}.db", synchronous="NORMAL")
    try:
        result = await fanout(log, cfg)
        if isinstance(log, SqliteEventLog):
            result["commits"] = log.commits
    finally:
        await log.aclose()
    return result


# --- driver --------------------------------------------------------------------------------


async def run_append(tmp: Path, cfg: Config) -> tuple[dict[str, float], Path, Path]:
    """Ours then raw on the same rows, ``repeats`` times; the ratio is the median of pairs.

    For context (not a target) raw is also run at ``producers`` rows per commit: the
    most one group commit can hold when every producer has one append in flight."""
    ours_rates: list[float] = []
    raw_rates: list[float] = []
    raw_small_rates: list[float] = []
    our_db, raw_db = tmp / "ours0.db", tmp / "raw0.db"
    for r in range(cfg.repeats):
        our_db, raw_db = tmp / f"ours{r}.db", tmp / f"raw{r}.db"
        ours_rates.append(await ours_append(our_db, cfg))
        rows = stored_rows(our_db)
        raw_rates.append(raw_append(raw_db, rows, cfg.raw_rows_per_commit))
        raw_small_rates.append(raw_append(tmp / f"rawsmall{r}.db", rows, cfg.producers))
        say(
            f"    raw:  {len(rows)} rows at {raw_rates[-1]:,.0f}/s "
            f"({cfg.raw_rows_per_commit}/commit), {raw_small_rates[-1]:,.0f}/s "
            f"({cfg.producers}/commit); same rows, same pragmas"
        )
    piped = [await ours_append_pipelined(tmp / f"piped{r}.db", cfg) for r in range(cfg.repeats)]
    piped_rate = statistics.median(rate for rate, _ in piped)
    piped_ratio = piped_rate / statistics.median(raw_rates)
    say(
        f"(a') append, pipelined producers: {piped_rate:,.0f} events/s durable in"
        f" {piped[0][1]} commits; against raw at {cfg.raw_rows_per_commit}/commit {piped_ratio:.3f}"
    )
    ratio = statistics.median(o / r for o, r in zip(ours_rates, raw_rates, strict=True))
    small = statistics.median(o / r for o, r in zip(ours_rates, raw_small_rates, strict=True))
    ours, raw = statistics.median(ours_rates), statistics.median(raw_rates)
    say(f"(a) append  ours {ours:>9,.0f} events/s   raw {raw:>9,.0f} rows/s     ratio {ratio:.3f}")
    say(f"            (against raw at {cfg.producers} rows/commit: ratio {small:.3f})")
    return (
        {
            "ours_append_per_s": ours,
            "raw_append_per_s": raw,
            "append_ratio": ratio,
            "raw_append_same_batch_per_s": statistics.median(raw_small_rates),
            "append_ratio_same_batch": small,
            "ours_append_pipelined_per_s": piped_rate,
            "append_ratio_pipelined": piped_ratio,
        },
        our_db,
        raw_db,
    )


async def run_replay(db: Path, raw_db: Path, cfg: Config) -> dict[str, float]:
    """``read()`` of one tree against a raw SELECT of the same records (``raw_db``: a row
    each); median of pairs."""
    tree = "bench_tree0"
    ours_rates: list[float] = []
    raw_rates: list[float] = []
    count = 0
    for _ in range(cfg.replay_repeats):
        rate, count = await ours_replay(db, tree)
        raw_rate, raw_count = raw_replay(raw_db, tree)
        assert count == raw_count, (count, raw_count)
        ours_rates.append(rate)
        raw_rates.append(raw_rate)
    ratio = statistics.median(o / r for o, r in zip(ours_rates, raw_rates, strict=True))
    ours, raw = statistics.median(ours_rates), statistics.median(raw_rates)
    say(
        f"(b) replay  ours {ours:>9,.0f} records/s  raw {raw:>9,.0f} rows/s     ratio {ratio:.3f}"
        f"   ({count} records of tree {tree}, median of {cfg.replay_repeats})"
    )
    return {
        "ours_replay_per_s": ours,
        "raw_replay_per_s": raw,
        "replay_ratio": ratio,
        "replay_records": count,
    }


async def run_fanout(tmp: Path, cfg: Config) -> dict[str, object]:
    say(
        f"fan-out: {cfg.subscribers} subscribers, each filtered to its own session; "
        f"{cfg.rate:,} events/s for {cfg.seconds}s from {cfg.fanout_producers} paced producers"
    )
    result: dict[str, object] = {}
    for backend in ("memory", "sqlite"):
        stats = await fanout_on(backend, tmp, cfg)
        say(
            f"(c) fan-out {backend:6}  p50 {stats['p50_ms']:.2f} ms  p99 {stats['p99_ms']:.2f} ms  "
            f"max {stats['max_ms']:.1f} ms  delivered {stats['deliveries']:.0f}/{stats['events']:.0f}  "
            f"achieved {stats['achieved_rate']:,.0f}/s  behind schedule p99 "
            f"{stats['schedule_lag_p99_ms']:.0f} ms"
            + (f"  commits {stats['commits']:.0f}" if "commits" in stats else "")
        )
        result[f"fanout_{backend}"] = stats
        result[f"fanout_{backend}_p50_ms"] = stats["p50_ms"]
        result[f"fanout_{backend}_p99_ms"] = stats["p99_ms"]
    low = dataclasses.replace(cfg, rate=cfg.sustainable_rate)
    stats = await fanout_on("sqlite", tmp, low)
    say(
        f"(c) fan-out sqlite at {low.rate:,}/s (a rate it sustains here): p50 {stats['p50_ms']:.2f} ms  "
        f"p99 {stats['p99_ms']:.2f} ms  achieved {stats['achieved_rate']:,.0f}/s  behind schedule "
        f"p99 {stats['schedule_lag_p99_ms']:.0f} ms"
    )
    result["fanout_sqlite_sustainable"] = stats
    result["fanout_backend"] = "sqlite"
    result["fanout_p50_ms"] = result["fanout_sqlite_p50_ms"]
    result["fanout_p99_ms"] = result["fanout_sqlite_p99_ms"]
    return result


def verdicts(result: dict[str, object]) -> dict[str, bool]:
    def value(name: str) -> float:
        figure = result[name]
        assert isinstance(figure, float)
        return figure

    return {
        "append_ratio": value("append_ratio") >= TARGETS["append_ratio"],
        "replay_ratio": value("replay_ratio") >= TARGETS["replay_ratio"],
        "fanout_p99_ms": value("fanout_p99_ms") < TARGETS["fanout_p99_ms"],
    }


async def main(cfg: Config) -> None:
    load_before = os.getloadavg()
    say(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average {load_before[0]:.2f}"
    )
    say(
        f"append: {cfg.producers} producers, {cfg.events:,} single-event appends; raw at "
        f"{cfg.raw_rows_per_commit} rows/commit; median of {cfg.repeats} pairs"
    )
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="halo-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        appended, db, raw_db = await run_append(tmp, cfg)
        result.update(appended)
        result.update(await run_replay(db, raw_db, cfg))
        result.update(await run_fanout(tmp, cfg))
    met = verdicts(result)
    say("targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in met.items()))
    result["targets"] = TARGETS
    result["met"] = met
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "load_average_before": round(load_before[0], 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Event-log benchmark against raw sqlite3.")
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run")
    parser.add_argument("--fanout-producers", type=int, default=Config.fanout_producers)
    parser.add_argument(
        "--pipelined-fanout", action="store_true", help="fan-out producers use append_nowait"
    )
    args = parser.parse_args()
    config = (
        Config(events=4_000, repeats=1, subscribers=200, seconds=0.5) if args.quick else Config()
    )
    config = dataclasses.replace(
        config, fanout_producers=args.fanout_producers, pipelined_fanout=args.pipelined_fanout
    )
    trio.run(main, config)
