"""Benchmark: passivated idle sessions and lazy recovery, against the same runtime with
passivation off (``resident_idle=None``: every session resident, every restart a full
replay), measured in the same run. Each case runs in a fresh child process of its own,
so its resident set size (RSS, from ``/proc/self/status``) is its own.

1. ``idle``: ``create_session`` makes ``--sessions`` sessions on the SQLite log
   (``--workers`` tasks at once), with the default ``resident_idle`` (passivated) and,
   for ``--baseline-sessions`` sessions, with passivation off; RSS before and after,
   per session. Target: 1,000,000 sessions under 1 GB of RSS.
2. ``restart``: a SQLite log of ``--events`` records in ``--restart-sessions``
   sessions (each a full run: created, a message, a round, a turn, a reply, done,
   repeated), of which ``--queued`` end with a message queued and ``--open`` with a
   turn open, as a kill -9 leaves them; written once through the log's own writer.
   A fresh process opens the runtime on it and sends one message to an idle session:
   the time from opening the log to that message's answer (``wait_idle``), lazy
   against the full replay; and whether the sessions with a queued message were
   answered without being asked. Target: under 1 s, lazily.

Human lines first; the last line is one JSON object.

    .venv/bin/python scripts/bench_passivation.py [--sessions 1000000]
        [--baseline-sessions 200000] [--events 1000000] [--restart-sessions 100000]
        [--skip idle|restart]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
from halo_actors.core.conversation import TextBlock
from halo_actors.core.events import (
    AgentDone,
    AgentStarted,
    AssistantReplied,
    Event,
    MessageQueued,
    RoundStarted,
    SessionCreated,
    TextStreamed,
    TurnCompleted,
)
from halo_actors.core.log import EventFilter, SqliteEventLog
from halo_actors.runtime.passivation import DEFAULT_RESIDENT_IDLE
from halo_actors.runtime.supervisor import open_supervisor
from halo_actors.tools.files import Workspace

OK = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text="ok"),)),))})


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def resident_idle_of(text: str) -> int | None:
    return None if text == "off" else int(text)


# --- children ---------------------------------------------------------------------------


async def idle_child(
    directory: Path, count: int, workers: int, resident: int | None
) -> dict[str, Any]:
    log = await SqliteEventLog.open(directory / "idle.db")
    try:
        async with open_supervisor(
            log, OK, workspace=Workspace(directory), resident_idle=resident
        ) as sup:
            before = rss_bytes()
            started = time.perf_counter()

            async def worker(n: int) -> None:
                for _ in range(n):
                    await sup.create_session(namespace="idle")

            async with trio.open_nursery() as nursery:
                for i in range(workers):
                    nursery.start_soon(worker, count // workers + (i < count % workers))
            seconds = time.perf_counter() - started
            await sup.wait_all_idle()
            if sup.registry.resident_idle is not None:
                sup.registry.sweep()
            after = rss_bytes()
            return {
                "sessions": count,
                "known": sum(1 for _ in sup.registry.ids()),
                "resident": len(sup.registry.resident),
                "passivated": len(sup.registry.passive),
                "create_per_s": round(count / seconds),
                "rss_before": before,
                "rss_after": after,
                "rss_per_session": round((after - before) / count, 1),
            }
    finally:
        await log.aclose()


def run_events(n: int) -> list[Event]:
    """What one run writes: a message, its round, a turn streaming its reply, the end."""
    text = f"message {n}: tell me something about the number {n}"
    return [
        MessageQueued(text=text),
        RoundStarted(text=text, drained=1),
        AgentStarted(),
        TextStreamed(text=f"{n} is "),
        TextStreamed(text="a number; "),
        TextStreamed(text="here is a reply."),
        AssistantReplied(content=(TextBlock(text=f"{n} is a number; here is a reply."),)),
        TurnCompleted(),
        AgentDone(),
    ]


async def write_log(
    path: Path, events: int, sessions: int, queued: int, opened: int
) -> dict[str, Any]:
    log = await SqliteEventLog.open(path)
    started = time.perf_counter()
    per_session = max(1, events // sessions)
    written = 0
    try:
        for s in range(sessions):
            sid = f"bench_{1_700_000_000_000 + s}_{s:08x}"
            batch: list[Event] = [SessionCreated(agent_id="default")]
            runs = 0
            while len(batch) + 9 <= per_session:
                batch += run_events(runs)
                runs += 1
            if s < queued:
                batch.append(MessageQueued(text="answer me after the restart"))
            elif s < queued + opened:
                batch += run_events(runs)[:3]  # a round and its turn, open
            log.append_nowait(sid, *batch)
            written += len(batch)
            if log.stamped_seq - log.last_seq > 20_000:
                await log.wait_durable(log.stamped_seq - 10_000)
        await log.wait_durable(log.stamped_seq)
    finally:
        await log.aclose()
    return {
        "events": written,
        "sessions": sessions,
        "seconds": round(time.perf_counter() - started, 1),
    }


async def restart_child(path: Path, resident: int | None, queued: int) -> dict[str, Any]:
    started = time.perf_counter()
    log = await SqliteEventLog.open(path)
    try:
        async with open_supervisor(
            log, OK, workspace=Workspace(path.parent), resident_idle=resident
        ) as sup:
            recovered = time.perf_counter() - started
            target = f"bench_{1_700_000_000_000 + queued + 1000}_{queued + 1000:08x}"
            await sup.send(target, "the first request after the restart")
            await sup.wait_idle(target)
            first = time.perf_counter() - started
            answered_first = sup.state(target).last_output == "ok"
            waiting = [f"bench_{1_700_000_000_000 + s}_{s:08x}" for s in range(queued)]
            for sid in waiting:  # nobody asks them: their runs started at the restart
                await sup.wait_idle(sid)
            unasked = time.perf_counter() - started
            answers = [
                r
                for sid in waiting
                for r in await log.read(EventFilter(session_id=sid, kinds=frozenset({"complete"})))
            ]
            return {
                "resident_idle": resident,
                "open_and_recover_s": round(recovered, 3),
                "first_answer_s": round(first, 3),
                "first_answered": answered_first,
                "queued_answered_s": round(unasked, 3),
                "queued_answered": sum(1 for _ in answers) >= queued,
                "resident_after": len(sup.registry.resident),
                "rss": rss_bytes(),
            }
    finally:
        await log.aclose()


# --- the parent ------------------------------------------------------------------------


def child(*argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {argv} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--baseline-sessions", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--restart-sessions", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=10)
    parser.add_argument("--open", type=int, default=10)
    parser.add_argument("--skip", action="append", default=[], choices=["idle", "restart"])
    parser.add_argument("--child", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(trio.run(run_child, *args.child)))
        return
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        "resident_idle": DEFAULT_RESIDENT_IDLE,
    }
    with tempfile.TemporaryDirectory() as tmp:
        if "idle" not in args.skip:
            n, base = str(args.sessions), str(args.baseline_sessions)
            w = str(args.workers)
            off = child("idle", tmp + "/off", base, w, "off")
            same = child("idle", tmp + "/same", base, w, str(DEFAULT_RESIDENT_IDLE))
            big = child("idle", tmp + "/big", n, w, str(DEFAULT_RESIDENT_IDLE))
            out["idle"] = {"passivation_off": off, "passivated_same_count": same, "passivated": big}
            print(
                f"idle, {base} sessions, passivation off: RSS {mib(off['rss_after'])} "
                f"({off['rss_per_session']} B/session, {off['create_per_s']:,}/s)"
            )
            print(
                f"idle, {base} sessions, passivated: RSS {mib(same['rss_after'])} "
                f"({same['rss_per_session']} B/session, {same['create_per_s']:,}/s)"
            )
            print(
                f"idle, {n} sessions, passivated: RSS {mib(big['rss_after'])} "
                f"({big['rss_per_session']} B/session, {big['create_per_s']:,}/s), "
                f"{big['resident']} resident; target < 1 GiB: {big['rss_after'] < 1 << 30}"
            )
            out["idle_rss_bytes"] = big["rss_after"]
        if "restart" not in args.skip:
            path = Path(tmp) / "restart.db"
            spec = [str(args.events), str(args.restart_sessions), str(args.queued), str(args.open)]
            out["restart_log"] = child("write", str(path), *spec)
            print(f"restart log: {out['restart_log']}")
            lazy = child("restart", str(path), str(DEFAULT_RESIDENT_IDLE), str(args.queued))
            eager = child("restart", str(path), "off", str(args.queued))
            out["restart"] = {"lazy": lazy, "full_replay": eager}
            print(f"restart, lazy: {lazy}")
            print(f"restart, full replay: {eager}")
            out["first_answer_s"] = lazy["first_answer_s"]
            out["first_answer_vs_full_replay"] = round(
                eager["first_answer_s"] / lazy["first_answer_s"], 1
            )
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out))


async def run_child(case: str, *argv: str) -> dict[str, Any]:
    if case == "idle":
        directory, count, workers, resident = argv
        await trio.Path(directory).mkdir(parents=True)
        return await idle_child(
            Path(directory), int(count), int(workers), resident_idle_of(resident)
        )
    if case == "write":
        path, events, sessions, queued, opened = argv
        return await write_log(Path(path), int(events), int(sessions), int(queued), int(opened))
    if case == "restart":
        path, resident, queued = argv
        return await restart_child(Path(path), resident_idle_of(resident), int(queued))
    raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    main()
