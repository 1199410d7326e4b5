"""PostgreSQL benchmark: the shared log and its nodes, against same-run baselines.

Usage: ``python scripts/bench_pg.py [--quick] [--skip append,turns,takeover,nodes]``
(the DSN comes from ``HALO_PG_DSN``, default the local server, database ``test``).

(a) append: durable append rows/s of ``PostgresEventLog`` — single writer pipelined
    (``append_nowait``, one checkpoint per event, ``wait_durable`` at the end: how the
    runtime appends), single writer and shared with ``append`` (each producer waits
    for its commit) — and of ``SqliteEventLog`` the same two ways; against raw
    psycopg inserting the very rows our PostgreSQL log stored (same table, same bodies,
    binary ``COPY``) at 100 rows per commit. Ratio: ours ÷ raw.
(b) turns: message → turn → reply round trips of one session (send, ``wait_idle``)
    whose scripted model answers ``ok``, and of 20 sessions at once, on SQLite, a
    single-writer and a shared PostgreSQL log.
(c) takeover: a node process owns a tree (``TreeLeases``, lease ``--ttl``) and
    appends; it is killed (SIGKILL); this process polls ``acquire`` every 50 ms and
    times kill → lease taken, and kill → first append of the new owner acknowledged.
    Target: p99 < ttl + 2 s.
(d) nodes: one node process vs three, each appending (shared mode, ``append``,
    ``--producers`` concurrent producers) to its own trees for ``--seconds``; total
    durable rows/s. Everything (the server too) shares this machine's cores.
(e) revocation: two real ``serve --store`` nodes; a token is revoked in the database
    (what ``token revoke --store`` does) and both nodes are polled every 10 ms; the
    time until each refuses it (401). Rule: within 1 s on every node.

Every schema it makes is dropped at the end. Human-readable lines first; the last
line is one JSON object. Timing here is informative only: it never gates a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import trio
from psycopg import sql

from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.core.events import TextStreamed
from halo_actors.core.log import EventLog, SqliteEventLog
from halo_actors.core.log.leases import TreeLeases
from halo_actors.core.log.pgcommit import COLUMN_TYPES
from halo_actors.core.log.pgschema import create_schema
from halo_actors.core.log.postgres import PostgresEventLog
from halo_actors.runtime.supervisor import open_supervisor
from halo_actors.tools.files import Workspace

DSN = os.environ.get("HALO_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
RUN = f"halo_bench{secrets.token_hex(3)}"
TARGETS = {"append_ratio": 0.5, "takeover_p99_over_ttl_s": 2.0}
RAW_ROWS_PER_COMMIT = 100
made: list[str] = []


def say(line: str) -> None:
    print(line, flush=True)


def new_schema() -> str:
    made.append(f"{RUN}_{len(made)}")
    return made[-1]


def drop_schemas() -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def open_pg(*, single_writer: bool, schema: str | None = None) -> PostgresEventLog:
    return await PostgresEventLog.open(
        DSN, schema=schema or new_schema(), single_writer=single_writer
    )


# --- (a) append ------------------------------------------------------------------------


async def produce(log: EventLog, producers: int, events: int, pipelined: bool) -> float:
    """``events`` single-event appends from ``producers`` tasks; seconds until all durable."""
    each = events // producers

    async def producer(i: int) -> None:
        sid = f"p{i}"
        for n in range(each):
            if pipelined:
                log.append_nowait(sid, TextStreamed(text=f"event {n} of producer {i}"))
                await trio.lowlevel.checkpoint()
            else:
                await log.append(sid, TextStreamed(text=f"event {n} of producer {i}"))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(producers):
            nursery.start_soon(producer, i)
    await log.wait_durable(log.stamped_seq)
    return time.perf_counter() - start


def raw_insert(rows: list[tuple[object, ...]], per_commit: int) -> float:
    """Raw psycopg: the same rows into a fresh schema's ``events``, binary COPY."""
    schema = new_schema()
    with psycopg.connect(DSN) as conn:
        create_schema(conn, schema)
        copy_sql = sql.SQL(
            "COPY {}.events (seq, session_id, root, ts, kind, epoch, body) FROM STDIN"
            " (FORMAT BINARY)"
        ).format(sql.Identifier(schema))
        start = time.perf_counter()
        for i in range(0, len(rows), per_commit):
            with conn.transaction(), conn.cursor() as cur, cur.copy(copy_sql) as copy:
                copy.set_types(COLUMN_TYPES)
                for row in rows[i : i + per_commit]:
                    copy.write_row(row)
        return time.perf_counter() - start


def stored_rows(schema: str) -> list[tuple[object, ...]]:
    with psycopg.connect(DSN) as conn:
        query = sql.SQL(
            "SELECT seq, session_id, root, ts, kind, epoch, body FROM {}.events ORDER BY seq"
        ).format(sql.Identifier(schema))
        return [tuple(r) for r in conn.execute(query)]


async def bench_append(events: int, producers: int, repeats: int) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(events / seconds)

    raw_rows: list[tuple[object, ...]] = []
    for _ in range(repeats):
        for name, single, pipelined, n_producers in (
            ("pg_single_pipelined", True, True, producers),
            ("pg_single_append", True, False, producers),
            ("pg_shared_append", False, False, producers),
            ("pg_shared_append_100_producers", False, False, 100),
        ):
            log = await open_pg(single_writer=single)
            try:
                note(name, await produce(log, n_producers, events, pipelined))
            finally:
                await log.aclose()
            if name == "pg_single_pipelined":
                raw_rows = stored_rows(log.schema)
        for name, pipelined in (("sqlite_pipelined", True), ("sqlite_append", False)):
            with tempfile.TemporaryDirectory(prefix="bench_pg_") as folder:
                slog = await SqliteEventLog.open(Path(folder) / "events.db")
                try:
                    note(name, await produce(slog, producers, events, pipelined))
                finally:
                    await slog.aclose()
        note(
            "raw_psycopg", await trio.to_thread.run_sync(raw_insert, raw_rows, RAW_ROWS_PER_COMMIT)
        )
    medians = {name: statistics.median(values) for name, values in figures.items()}
    raw = medians["raw_psycopg"]
    say(f"append: {events} events, {producers} producers, median of {repeats}; rows/s")
    for name, rate in medians.items():
        say(f"  {name:34s} {rate:10.0f}   {rate / raw:5.2f}x raw")
    return {
        "rows_per_s": {k: round(v) for k, v in medians.items()},
        "ratio_to_raw": {k: round(v / raw, 3) for k, v in medians.items()},
    }


# --- (b) turns -------------------------------------------------------------------------


async def turns_on(log: EventLog, count: int, sessions: int) -> float:
    """Turns/s: ``sessions`` sessions each doing ``count // sessions`` send+wait_idle."""
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text="ok"),)),))})
    with tempfile.TemporaryDirectory(prefix="bench_pg_ws_") as folder:
        async with open_supervisor(log, model, workspace=Workspace(folder)) as sup:
            sids = [await sup.create_session(namespace="bench") for _ in range(sessions)]
            each = count // sessions

            async def run(sid: str, n: int) -> None:
                for _ in range(n):
                    await sup.send(sid, "ping")
                    await sup.wait_idle(sid)

            async with trio.open_nursery() as nursery:  # warm-up
                for sid in sids:
                    nursery.start_soon(run, sid, 2)
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for sid in sids:
                    nursery.start_soon(run, sid, each)
            seconds = time.perf_counter() - start
            if any(sup.output(sid) != "ok" for sid in sids):
                raise RuntimeError("turns: a session did not answer 'ok'")
    return each * sessions / seconds


async def bench_turns(count: int) -> dict[str, Any]:
    opens: dict[str, Callable[[str], Awaitable[EventLog]]] = {
        "sqlite": lambda folder: SqliteEventLog.open(Path(folder) / "events.db"),
        "pg_single": lambda folder: open_pg(single_writer=True),
        "pg_shared": lambda folder: open_pg(single_writer=False),
    }
    out: dict[str, Any] = {}
    say(f"turns: {count} turns, turns/s (one session; 20 sessions at once)")
    for name, open_ in opens.items():
        for sessions in (1, 20):
            with tempfile.TemporaryDirectory(prefix="bench_pg_log_") as folder:
                log = await open_(folder)
                try:
                    rate = await turns_on(log, count, sessions)
                finally:
                    await log.aclose()
            out[f"{name}_{sessions}"] = round(rate, 1)
        say(f"  {name:10s} {out[f'{name}_1']:8.1f}   {out[f'{name}_20']:8.1f}")
    return out


# --- (c) takeover, (d) nodes: node processes ------------------------------------------


async def lease_node(schema: str, node_id: str, ttl: float) -> None:
    """Child process: own tree ``t`` and append to it until killed."""
    log = await PostgresEventLog.open(DSN, schema=schema, node_id=node_id)
    try:
        async with TreeLeases.open(log, ttl=ttl) as leases:
            while not await leases.acquire("t"):  # noqa: ASYNC110 - polls the database
                await trio.sleep(0.05)
            while True:
                await log.append("t", TextStreamed(text=node_id))
                say("ack")
                await trio.sleep(0.02)
    finally:
        await log.aclose()


async def append_node(schema: str, node_id: str, seconds: float, producers: int) -> None:
    """Child process: ``producers`` tasks append to this node's own trees for ``seconds``;
    prints how many rows were acknowledged."""
    log = await PostgresEventLog.open(DSN, schema=schema, node_id=node_id)
    done = 0
    say("ready")
    sys.stdin.readline()  # start together

    deadline = trio.current_time() + seconds

    async def producer(i: int) -> None:
        nonlocal done
        sid = f"{node_id}_{i}"
        while trio.current_time() < deadline:  # an append is shielded: no cancel point
            await log.append(sid, TextStreamed(text=f"row of {sid}"))
            done += 1

    try:
        async with trio.open_nursery() as nursery:
            for i in range(producers):
                nursery.start_soon(producer, i)
    finally:
        await log.aclose()
    say(json.dumps({"rows": done, "seconds": seconds}))


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HALO_PG_DSN": DSN},
    )


async def bench_takeover(repeats: int, ttl: float) -> dict[str, Any]:
    taken: list[float] = []
    first_ack: list[float] = []
    for r in range(repeats):
        schema = new_schema()
        log = await open_pg(single_writer=False, schema=schema)  # creates the tables
        proc = child("lease", schema, f"victim{r}", str(ttl))
        try:
            assert proc.stdout is not None
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            if line.strip() != "ack":
                raise RuntimeError(f"takeover: the node said {line!r}")
            await trio.sleep(ttl * (0.2 + 0.6 * (r % 5) / 4))  # kill at varied lease ages
            proc.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            async with TreeLeases.open(log, ttl=ttl) as leases:
                while not await leases.acquire("t"):  # noqa: ASYNC110 - polls the database
                    await trio.sleep(0.05)
                taken.append(time.perf_counter() - killed)
                await log.append("t", TextStreamed(text="taken over"))
                first_ack.append(time.perf_counter() - killed)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            await log.aclose()

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    out = {
        "ttl_s": ttl,
        "repeats": repeats,
        "taken_p50_s": round(statistics.median(taken), 3),
        "taken_p99_s": round(pct(taken, 0.99), 3),
        "first_append_p50_s": round(statistics.median(first_ack), 3),
        "first_append_p99_s": round(pct(first_ack, 0.99), 3),
    }
    say(
        f"takeover after SIGKILL (lease {ttl} s, {repeats} kills): lease taken p50"
        f" {out['taken_p50_s']} s p99 {out['taken_p99_s']} s; first append acknowledged p50"
        f" {out['first_append_p50_s']} s p99 {out['first_append_p99_s']} s"
        f" (target p99 < {ttl + TARGETS['takeover_p99_over_ttl_s']} s)"
    )
    return out


async def bench_nodes(seconds: float, producers: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    say(f"nodes: shared log, {producers} producers per node, {seconds} s; durable rows/s")
    for count in (1, 3):
        schema = new_schema()
        log = await open_pg(single_writer=False, schema=schema)
        await log.aclose()
        procs = [
            child("append", schema, f"n{i}", str(seconds), str(producers)) for i in range(count)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                await trio.to_thread.run_sync(proc.stdout.readline)  # "ready"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = []
            for proc in procs:
                assert proc.stdout is not None
                results.append(json.loads(await trio.to_thread.run_sync(proc.stdout.readline)))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        rate = sum(r["rows"] for r in results) / seconds
        out[f"{count}_node_rows_per_s"] = round(rate)
        say(f"  {count} node(s): {rate:8.0f} rows/s")
    out["three_over_one"] = round(out["3_node_rows_per_s"] / out["1_node_rows_per_s"], 2)
    return out


# --- (e) revocation across nodes -------------------------------------------------------


def serve_node(schema: str, folder: Path, node_id: str) -> tuple[subprocess.Popen[str], str]:
    """A ``serve --store`` node on a free port; (process, base url) once it listens."""
    command = [sys.executable, "-m", "halo_actors", "serve", "--port", "0", "--state"]
    command += [str(folder / "state"), "--workspace", str(folder / "ws"), "--store", DSN]
    command += ["--store-schema", schema, "--node-id", node_id]
    log = open(folder / f"{node_id}.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"node {node_id} did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1].strip()


async def bench_revocation(repeats: int) -> dict[str, Any]:
    import httpx

    from halo_actors.fronts.http.pgtokens import PgTokenStore

    schema = new_schema()
    with tempfile.TemporaryDirectory(prefix="bench_pg_tok_") as tmp:
        folder = Path(tmp)
        (folder / "ws").mkdir()
        store = PgTokenStore(DSN, schema)
        store.load()  # creates the table before the nodes start
        nodes = [serve_node(schema, folder, f"r{i}") for i in range(2)]
        took: list[float] = []
        try:
            async with httpx.AsyncClient(timeout=10) as client:

                async def code(url: str, token: str) -> int:
                    resp = await client.get(f"{url}/api/web/sessions", headers={"x-token": token})
                    return resp.status_code

                for _ in range(repeats):
                    token = await trio.to_thread.run_sync(
                        store.create, "bench", "full", folder / "ws"
                    )
                    for _, url in nodes:
                        while await code(url, token) != 200:  # noqa: ASYNC110 - polls
                            await trio.sleep(0.01)
                    await trio.to_thread.run_sync(store.revoke, token)
                    revoked = time.perf_counter()
                    pending = {url for _, url in nodes}
                    while pending:
                        for url in sorted(pending):
                            if await code(url, token) == 401:
                                pending.discard(url)
                                took.append(time.perf_counter() - revoked)
                        await trio.sleep(0.01)
        finally:
            for proc, _ in nodes:
                proc.send_signal(signal.SIGTERM)
            for proc, _ in nodes:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            store.close()
    ordered = sorted(took)
    out = {
        "samples": len(took),
        "p50_s": round(statistics.median(took), 3),
        "p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "max_s": round(ordered[-1], 3),
    }
    say(
        f"revocation across 2 nodes ({repeats} tokens, {len(took)} node refusals): p50"
        f" {out['p50_s']} s, p99 {out['p99_s']} s, max {out['max_s']} s (rule: within 1 s)"
    )
    return out


# --- main --------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    skip = set(args.skip.split(",")) if args.skip else set()
    out: dict[str, Any] = {}
    if "append" not in skip:
        out["append"] = await bench_append(args.events, args.producers, args.repeats)
    if "turns" not in skip:
        out["turns"] = await bench_turns(args.turns)
    if "takeover" not in skip:
        out["takeover"] = await bench_takeover(args.takeovers, args.ttl)
    if "nodes" not in skip:
        out["nodes"] = await bench_nodes(args.seconds, args.producers)
    if "revocation" not in skip:
        out["revocation"] = await bench_revocation(args.revocations)
    return out


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--takeovers", type=int, default=10)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--revocations", type=int, default=20)
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "lease":
            trio.run(lease_node, rest[0], rest[1], float(rest[2]))
        else:
            trio.run(append_node, rest[0], rest[1], float(rest[2]), int(rest[3]))
        return
    if args.quick:
        args.events, args.repeats, args.turns, args.takeovers, args.seconds = 4_000, 1, 60, 3, 2.0
        args.revocations = 5
    say(
        f"bench_pg {time.strftime('%Y-%m-%d %H:%M:%S')} on {platform.node()}, {os.cpu_count()} cpus,"
        f" load {os.getloadavg()[0]:.2f}, server {DSN}"
    )
    try:
        out = trio.run(main, args)
    finally:
        drop_schemas()
    out["load_after"] = round(os.getloadavg()[0], 2)
    out["targets"] = TARGETS
    say(f"load average after: {out['load_after']}")
    print(json.dumps(out))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        cli()
