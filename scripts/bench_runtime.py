"""Benchmark: the session runtime against autogen-core's ``SingleThreadedAgentRuntime``.

Every figure is compared with a baseline measured in the same run (STYLE rule 13):

1. ``turns``: message → turn → reply round trips of ONE session whose scripted model
   answers every message with ``ok`` at once (send, ``wait_idle``, repeat), with the
   in-memory log and with the durable SQLite log, against autogen-core agent-to-agent
   RPC (a caller agent ``send_message``-ing a request to one ``RoutedAgent`` and
   awaiting its response, N times). Ratio: our turns/s ÷ autogen RPCs/s. The session's
   conversation grows by two messages a turn, so the first and last tenth are printed too.
2. ``tree fan-out``: a root's one model step starts N children (``start_session``
   ×N in one batch); each child runs one turn and reports back; timed until
   ``wait_idle(root)``. Baseline: an autogen root agent sending to N agent ids at
   once and gathering their replies. Ratio: autogen time ÷ our time.
3. ``stop``: a tree of ``--stop-sessions`` sessions (root → mids → leaves) whose
   leaves sit in a tool call, timed ``await sup.stop(root)``. Baseline: cancelling a
   bare trio nursery of the same number of ``trio.sleep_forever`` tasks. Ratio: our
   time ÷ bare time. The leaves' tool is ``bench_block`` (blocks forever), added to
   the built-in tool table by this script only; ``--stop-leaf model`` makes the
   leaves sit in a slow model step (``Step(delay=3600)``) instead.
4. ``idle memory``: ``tracemalloc`` growth while ``create_session`` makes
   ``--idle-sessions`` sessions on the memory log, per session; split into the log's
   records (measured by dropping them afterwards) and the runtime's own objects.

Ours runs under ``trio.run``, autogen under ``asyncio.run``, one after the other in
this process; the turns and fan-out cases run ``--repeat`` times (alternating with
the peer), the stop case ``--stop-repeat`` times, and the median counts; the ratio of
each back-to-back pair is printed (and in the JSON) too, since on a noisy machine its
spread says how far one run's ratio of medians can be trusted. Log events the runtime
emits are counted (and swallowed), not printed.
Human lines first; the last line is one JSON object.

    .venv/bin/python scripts/bench_runtime.py [--turns 500] [--fanout 1000]
        [--stop-sessions 10000] [--stop-leaf tool|model] [--stop-repeat 1]
        [--idle-sessions 100000] [--repeat 3] [--skip turns|fanout|stop|idle]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec
import structlog
import trio
import trio.testing

from halo_actors.agent.scripted import Rule, Script, ScriptedCall, ScriptedModel, Step
from halo_actors.core import ids
from halo_actors.core.events import TextStreamed, TurnCompleted
from halo_actors.core.log import EventFilter, EventLog, MemoryEventLog, SqliteEventLog
from halo_actors.runtime.embed import log_path
from halo_actors.runtime.profiles import DEFAULT_TOOLS, AgentProfile, Limits, Profiles
from halo_actors.runtime.rounds import FINAL_HEADER
from halo_actors.runtime.supervisor import Supervisor, open_supervisor
from halo_actors.tools.base import Tool, ToolContext, ToolOutput, define_tool
from halo_actors.tools.files import Workspace

try:
    from autogen_core import (
        AgentId,
        MessageContext,
        RoutedAgent,
        SingleThreadedAgentRuntime,
        message_handler,
    )
except ImportError:  # pragma: no cover - the peer is a bench-only extra
    sys.exit("autogen-core is missing: pip install -e '.[bench]'")

from bench_langgraph import PeerTurns, langgraph_turns

BLOCK_TOOL = "bench_block"
WARM_TURNS = 20
SAFETY_SECONDS = 600.0
"""Upper bound for any one timed case: a hang fails loudly instead of running forever."""


# --- log events: counted, not printed ------------------------------------------------


def quiet_logging(counts: Counter[str]) -> None:
    """Route structlog into ``counts`` (``level:event``) and drop every event."""

    def count(_logger: object, method: str, event: MutableMapping[str, Any]) -> NoReturn:
        counts[f"{method}:{event.get('event')}"] += 1
        raise structlog.DropEvent

    structlog.configure(processors=[count], cache_logger_on_first_use=True)


# --- autogen-core: the peer ------------------------------------------------------------


@dataclass
class Ping:
    text: str


@dataclass
class Pong:
    text: str


@dataclass
class RunRpcs:
    count: int


@dataclass
class RpcsDone:
    seconds: float


@dataclass
class FanOut:
    count: int


@dataclass
class FanDone:
    replies: int


class Worker(RoutedAgent):
    """Answers every request with ``ok`` (the scripted model's answer, on autogen)."""

    def __init__(self) -> None:
        super().__init__("answers ok")

    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> Pong:
        return Pong(text="ok")


class Caller(RoutedAgent):
    """Sends ``count`` sequential requests to the worker and times them."""

    def __init__(self) -> None:
        super().__init__("calls the worker")

    @message_handler
    async def on_run(self, message: RunRpcs, ctx: MessageContext) -> RpcsDone:
        worker = AgentId("worker", "default")
        started = time.perf_counter()
        for _ in range(message.count):
            reply = await self.send_message(Ping(text="ping"), worker)
            assert isinstance(reply, Pong)
        return RpcsDone(seconds=time.perf_counter() - started)


class FanRoot(RoutedAgent):
    """Sends one task to ``count`` distinct agents at once and gathers their replies."""

    def __init__(self) -> None:
        super().__init__("fans out")

    @message_handler
    async def on_fan_out(self, message: FanOut, ctx: MessageContext) -> FanDone:
        replies = await asyncio.gather(
            *(
                self.send_message(Ping(text="child task"), AgentId("child", str(i)))
                for i in range(message.count)
            )
        )
        return FanDone(replies=sum(isinstance(r, Pong) and r.text == "ok" for r in replies))


async def autogen_rpc(count: int) -> float:
    """Agent-to-agent RPCs per second (caller agent → worker agent, sequential)."""
    runtime = SingleThreadedAgentRuntime()
    await Worker.register(runtime, "worker", Worker)
    await Caller.register(runtime, "caller", Caller)
    runtime.start()
    caller = AgentId("caller", "default")
    await runtime.send_message(RunRpcs(count=min(100, count)), caller)  # warm-up
    done = await runtime.send_message(RunRpcs(count=count), caller)
    await runtime.stop_when_idle()
    await runtime.close()
    return float(count / done.seconds)


async def autogen_external_rpc(count: int) -> float:
    """The same from outside the runtime (``runtime.send_message`` in a loop)."""
    runtime = SingleThreadedAgentRuntime()
    await Worker.register(runtime, "worker", Worker)
    runtime.start()
    worker = AgentId("worker", "default")
    await runtime.send_message(Ping(text="ping"), worker)
    started = time.perf_counter()
    for _ in range(count):
        await runtime.send_message(Ping(text="ping"), worker)
    seconds = time.perf_counter() - started
    await runtime.stop_when_idle()
    await runtime.close()
    return count / seconds


async def autogen_fanout(count: int) -> float:
    """Seconds from the root's request to its gathered reply (children created lazily)."""
    runtime = SingleThreadedAgentRuntime()
    await Worker.register(runtime, "child", Worker)
    await FanRoot.register(runtime, "root", FanRoot)
    runtime.start()
    root = AgentId("root", "default")
    await runtime.send_message(FanOut(count=0), root)  # the root exists before the clock
    started = time.perf_counter()
    done = await runtime.send_message(FanOut(count=count), root)
    seconds = time.perf_counter() - started
    await runtime.stop_when_idle()
    await runtime.close()
    if done.replies != count:
        raise RuntimeError(f"autogen fan-out: {done.replies} of {count} replies")
    return seconds


class GcTimer:
    """Wall time spent in the cyclic garbage collector while active (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.full += info["generation"] == 2

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


# --- ours -------------------------------------------------------------------------------


async def open_log(durable: bool, folder: str) -> EventLog:
    if durable:
        return await SqliteEventLog.open(log_path(folder))
    return MemoryEventLog()


@dataclass
class TurnFigures:
    per_second: float
    first_tenth_per_second: float
    last_tenth_per_second: float
    records_per_turn: float


async def our_turns(count: int, durable: bool) -> TurnFigures:
    """Sequential message → turn → reply round trips of one session."""
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text="ok"),)),))})
    with tempfile.TemporaryDirectory(prefix="bench_rt_") as folder:
        event_log = await open_log(durable, folder)
        try:
            async with open_supervisor(event_log, model, workspace=Workspace(folder)) as sup:
                sid = await sup.create_session(namespace="bench")
                for _ in range(min(WARM_TURNS, count)):  # warm-up, same session
                    await sup.send(sid, "ping")
                    await sup.wait_idle(sid)
                seq_before = event_log.last_seq
                tenth = max(1, count // 10)
                stamps = [time.perf_counter()]
                with trio.fail_after(SAFETY_SECONDS):
                    for i in range(count):
                        await sup.send(sid, "ping")
                        await sup.wait_idle(sid)
                        if (i + 1) % tenth == 0:
                            stamps.append(time.perf_counter())
                seconds = stamps[-1] - stamps[0]
                if sup.output(sid) != "ok" or sup.is_running(sid):
                    raise RuntimeError("turns: the session did not answer 'ok' and go idle")
                records = event_log.last_seq - seq_before
        finally:
            await event_log.aclose()
    return TurnFigures(
        per_second=count / seconds,
        first_tenth_per_second=tenth / (stamps[1] - stamps[0]),
        last_tenth_per_second=tenth / (stamps[-1] - stamps[-2]),
        records_per_turn=records / count,
    )


@dataclass
class StreamFigures:
    deltas: int
    per_second: float
    commits: int


async def our_stream(deltas: int) -> StreamFigures:
    """One session on the SQLite log streams ``deltas`` text deltas (a model with no delay);
    timed from ``send`` until a subscriber of the session has received the terminal
    ``complete``, i.e. every delta durable and delivered."""
    text = "abcd" * deltas
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text=text, chunk=4),)),))})
    with tempfile.TemporaryDirectory(prefix="bench_rt_") as folder:
        event_log = await SqliteEventLog.open(log_path(folder))
        try:
            async with open_supervisor(event_log, model, workspace=Workspace(folder)) as sup:
                sid = await sup.create_session(namespace="bench")
                got = 0
                commits = event_log.commits
                with trio.fail_after(SAFETY_SECONDS):
                    async with event_log.subscribe(  # the turn never yields: one burst
                        EventFilter(session_id=sid), event_log.last_seq, buffer_size=2 * deltas
                    ) as subscription:
                        started = time.perf_counter()
                        await sup.send(sid, "stream")
                        async for record in subscription:
                            got += isinstance(record.event, TextStreamed)
                            if isinstance(record.event, TurnCompleted):
                                break
                        seconds = time.perf_counter() - started
                if got != deltas:
                    raise RuntimeError(f"stream: {got} of {deltas} deltas delivered")
                await sup.wait_idle(sid)
                commits = event_log.commits - commits
        finally:
            await event_log.aclose()
    return StreamFigures(deltas, deltas / seconds, commits)


def bench_stream(n: int, out: dict[str, Any]) -> None:
    figures = run_trio(our_stream, n)
    out |= {
        "stream_deltas": n,
        "stream_sqlite_per_s": round(figures.per_second),
        "stream_commits": figures.commits,
    }
    print(f"one session streaming {n} deltas, SQLite log, until a subscriber has them all:")
    print(f"  {figures.per_second:8.0f} deltas/s (target ≥ 5,000) in {figures.commits} commits")


def wide_profiles(parallel: int, *, extra_tools: tuple[str, ...] = ()) -> Profiles:
    limits = Limits(max_parallel_tools=parallel)
    profile = AgentProfile(name="default", limits=limits, tools=DEFAULT_TOOLS + extra_tools)
    return Profiles({"default": profile})


@dataclass
class FanFigures:
    seconds: float
    root_turns: int
    children_done: int
    early_idle: int
    """How often ``wait_idle(root)`` returned while reports were still on their way."""


def reports_received(sup: Supervisor, root: str) -> int:
    """Final reports the root has taken into its conversation."""
    return sum(m.text().count(FINAL_HEADER) for m in sup.state(root).messages if m.role == "user")


async def our_fanout(count: int, durable: bool) -> FanFigures:
    """A root starts ``count`` children in one batch; each answers and reports back."""
    calls = tuple(
        ScriptedCall(name="start_session", input={"task": "child task", "label": f"c{i}"})
        for i in range(count)
    )
    script = Script(
        rules=(
            Rule(match=r"\Afan out\Z", steps=(Step(calls=calls), Step(text="all started"))),
            Rule(match=r"child task\Z", steps=(Step(text="done"),)),
            Rule(steps=(Step(text="ack"),)),
        )
    )
    model = ScriptedModel({"default": script})
    with tempfile.TemporaryDirectory(prefix="bench_rt_") as folder:
        event_log = await open_log(durable, folder)
        try:
            async with open_supervisor(
                event_log, model, workspace=Workspace(folder), profiles=wide_profiles(count)
            ) as sup:
                root = await sup.create_session(namespace="bench")
                early = 0
                with trio.fail_after(SAFETY_SECONDS):
                    started = time.perf_counter()
                    await sup.send(root, "fan out")
                    await sup.wait_idle(root)
                    seconds = time.perf_counter() - started
                    while reports_received(sup, root) < count:  # wait_idle came back too soon
                        early += 1
                        await trio.testing.wait_all_tasks_blocked()
                        await sup.wait_idle(root)
                        seconds = time.perf_counter() - started
                children = sup.children(root)
                done = sum(
                    sup.output(c) == "done" and sup.state(c).final_reports == 1 for c in children
                )
                root_turns = sum(
                    m.role == "user" and bool(m.text()) for m in sup.state(root).messages
                )
                if len(children) != count or done != count:
                    raise RuntimeError(f"fan-out: {done} of {len(children)}/{count} children done")
        finally:
            await event_log.aclose()
    return FanFigures(seconds=seconds, root_turns=root_turns, children_done=done, early_idle=early)


class _NoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


def block_tool(entered: Callable[[], None]) -> Tool:
    """``bench_block``: calls ``entered``, then blocks until cancelled (a custom tool)."""

    async def block(ctx: ToolContext, args: _NoArgs) -> ToolOutput:
        entered()
        await trio.sleep_forever()

    return define_tool(BLOCK_TOOL, "Blocks until cancelled (benchmark).", _NoArgs, block)


@dataclass
class StopFigures:
    sessions: int
    leaves: int
    build_seconds: float
    stop_seconds: float
    records_during_stop: int
    gc_seconds: float
    full_collections: int
    gc_after_seconds: float
    """One full collection right after the stop: at most what the stop's paused collector
    left for later (``gcpause.py``)."""


async def our_stop(total: int, leaf_mode: str, durable: bool) -> StopFigures:
    """Stop a tree of ``total`` sessions whose leaves sit in a tool call (or a model step)."""
    mids = max(1, round(math.sqrt(total - 1)) - 1)
    per_mid = [(total - 1 - mids) // mids + (i < (total - 1 - mids) % mids) for i in range(mids)]
    leaves = sum(per_mid)
    in_tool = 0
    all_in = trio.Event()

    def entered() -> None:
        nonlocal in_tool
        in_tool += 1
        if in_tool == leaves:
            all_in.set()

    tool = block_tool(entered)
    if leaf_mode == "tool":
        step = Step(calls=(ScriptedCall(name=BLOCK_TOOL),))
    else:
        step = Step(delay=3600, text="x")
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(step,)),))})
    profiles = wide_profiles(8, extra_tools=(BLOCK_TOOL,))
    with tempfile.TemporaryDirectory(prefix="bench_rt_") as folder:
        event_log = await open_log(durable, folder)
        try:
            async with open_supervisor(
                event_log, model, workspace=Workspace(folder), profiles=profiles, tools=[tool]
            ) as sup:
                with trio.fail_after(SAFETY_SECONDS):
                    built = time.perf_counter()
                    root = await sup.create_session(namespace="bench")
                    leaf_ids = []
                    for m, n in enumerate(per_mid):
                        mid = ids.child_id(root, f"m{m}")
                        await sup.create_session(mid, parent_id=root)
                        for j in range(n):
                            leaf = ids.child_id(mid, f"l{j}")
                            await sup.create_session(leaf, parent_id=mid)
                            await sup.send(leaf, "block")
                            leaf_ids.append(leaf)
                    if leaf_mode == "tool":
                        await all_in.wait()
                    else:
                        await _wait_all_streaming(sup, leaf_ids)
                    build_seconds = time.perf_counter() - built
                    gc.collect()
                    seq_before = event_log.last_seq
                    with GcTimer() as collector:
                        started = time.perf_counter()
                        await sup.stop(root)
                        stop_seconds = time.perf_counter() - started
                    after = time.perf_counter()
                    gc.collect()
                    gc_after_seconds = time.perf_counter() - after
                records = event_log.last_seq - seq_before
                sessions = len(sup.subtree(root))
                stopped = sum(sup.state(s).lifecycle == "stopped" for s in sup.subtree(root))
                running = sum(sup.is_running(s) for s in sup.subtree(root))
                if stopped != sessions or running:
                    raise RuntimeError(f"stop: {stopped}/{sessions} stopped, {running} running")
        finally:
            await event_log.aclose()
    return StopFigures(
        sessions,
        leaves,
        build_seconds,
        stop_seconds,
        records,
        collector.seconds,
        collector.full,
        gc_after_seconds,
    )


async def _wait_all_streaming(sup: Supervisor, leaves: list[str]) -> None:
    """Until every leaf's turn is open and every task sleeps (the slow model step)."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if all(sup.state(s).turn_open for s in leaves):
            return
        await trio.sleep(0.01)


async def bare_cancel(count: int) -> float:
    """Seconds from cancelling a nursery of ``count`` sleeping tasks until it has exited."""
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(trio.sleep_forever)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        started = time.perf_counter()
        nursery.cancel_scope.cancel()
    return time.perf_counter() - started


@dataclass
class IdleFigures:
    sessions: int
    total_bytes: float
    log_bytes: float
    runtime_bytes: float
    seconds: float
    top_sites: list[str]


async def idle_memory(count: int) -> IdleFigures:
    """tracemalloc growth per idle session (memory log), split into log and runtime."""
    model = ScriptedModel({"default": Script(rules=(Rule(steps=(Step(text="ok"),)),))})
    with tempfile.TemporaryDirectory(prefix="bench_rt_") as folder:
        event_log = MemoryEventLog()
        async with open_supervisor(event_log, model, workspace=Workspace(folder)) as sup:
            for _ in range(100):  # warm-up: lazy caches, first-use configuration
                await sup.create_session(namespace="warm")
            gc.collect()
            tracemalloc.start()
            before_snapshot = tracemalloc.take_snapshot()
            before, _ = tracemalloc.get_traced_memory()
            started = time.perf_counter()
            made = [await sup.create_session(namespace="idle") for _ in range(count)]
            seconds = time.perf_counter() - started
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
            after_snapshot = tracemalloc.take_snapshot()
            if any(sup.is_running(s) for s in made):
                raise RuntimeError("idle: a freshly created session holds a run")
            # the log's share: drop its records (bench-only reach into the backend)
            event_log._records.clear()
            event_log._by_session.clear()
            event_log._by_tree.clear()
            gc.collect()
            without_log, _ = tracemalloc.get_traced_memory()
            del made
            tracemalloc.stop()
        stats = after_snapshot.compare_to(before_snapshot, "lineno")
        top = [
            f"{s.size_diff / count:7.1f} B  {s.traceback[0].filename.rsplit('site-packages/', 1)[-1]}"
            f":{s.traceback[0].lineno}"
            for s in stats[:12]
        ]
    return IdleFigures(
        sessions=count,
        total_bytes=(after - before) / count,
        log_bytes=(after - without_log) / count,
        runtime_bytes=(without_log - before) / count,
        seconds=seconds,
        top_sites=top,
    )


# --- driver -------------------------------------------------------------------------------


def run_trio(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    gc.collect()
    return trio.run(fn, *args)


def run_asyncio(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    gc.collect()

    async def main() -> Any:
        return await fn(*args)

    return asyncio.run(main())


def median(values: list[float]) -> float:
    return float(statistics.median(values))


PEER_PACKAGES = ("autogen-core", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")


def pair_ratios(ours: list[float], theirs: list[float]) -> list[float]:
    """``ours[i] / theirs[i]`` for each pair measured back to back (a rate over a rate,
    or a time over a time inverted by the caller's order): on a noisy machine the spread
    of these says more than one ratio of medians."""
    return [round(a / b, 3) for a, b in zip(ours, theirs, strict=True)]


def print_pairs(ratios: list[float]) -> None:
    pairs = " ".join(f"×{r:.2f}" for r in ratios)
    print(f"      each pair, measured back to back: {pairs} (median ×{median(ratios):.2f})")


def peer_versions() -> dict[str, str]:
    """The installed peers' versions: the bench extra pins them from below only, so a new
    venv may measure a newer release than an earlier run did."""
    return {name: importlib.metadata.version(name) for name in PEER_PACKAGES}


def code_version() -> str:
    """The commit measured (read-only ``git rev-parse``; the tree may have local edits)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def run_langgraph(n: int, saver: str) -> PeerTurns:
    gc.collect()
    with tempfile.TemporaryDirectory(prefix="bench_lg_") as folder:
        return langgraph_turns(n, saver, folder)


def bench_turns(n: int, repeat: int, peer_repeat: int, out: dict[str, Any]) -> None:
    rpc, ext, mem, sql = [], [], [], []
    lg: dict[str, list[PeerTurns]] = {"memory": [], "sqlite": []}
    for i in range(repeat):
        rpc.append(run_asyncio(autogen_rpc, n))
        ext.append(run_asyncio(autogen_external_rpc, n))
        mem.append(run_trio(our_turns, n, False))
        if i < peer_repeat:
            lg["memory"].append(run_langgraph(n, "memory"))
        sql.append(run_trio(our_turns, n, True))
        if i < peer_repeat:
            lg["sqlite"].append(run_langgraph(n, "sqlite"))
    bench_langgraph_figures(n, lg, {"memory": mem, "sqlite": sql}, out)
    base = median(rpc)
    figures: dict[str, float] = {}
    for name, runs in (("memory", mem), ("sqlite", sql)):
        figures[name] = median([t.per_second for t in runs])
        out[f"turns_{name}_per_s"] = round(figures[name])
        out[f"turns_{name}_first_tenth_per_s"] = round(
            median([t.first_tenth_per_second for t in runs])
        )
        out[f"turns_{name}_last_tenth_per_s"] = round(
            median([t.last_tenth_per_second for t in runs])
        )
    out |= {
        "turns": n,
        "records_per_turn": mem[0].records_per_turn,
        "autogen_rpc_per_s": round(base),
        "autogen_external_rpc_per_s": round(median(ext)),
        "turns_vs_autogen_memory": round(figures["memory"] / base, 3),
        "turns_vs_autogen_sqlite": round(figures["sqlite"] / base, 3),
        "turns_vs_autogen_memory_pairs": pair_ratios([t.per_second for t in mem], rpc),
        "turns_vs_autogen_sqlite_pairs": pair_ratios([t.per_second for t in sql], rpc),
    }
    print(
        f"turns ({n} sequential round trips, one session, {mem[0].records_per_turn:g} records/turn):"
    )
    print(
        f"  autogen agent→agent RPC  {base:8.0f} /s  (runtime.send_message from outside: {median(ext):.0f} /s)"
    )
    for name, target in (("memory", 1.5), ("sqlite", 1)):
        rate = figures[name]
        print(
            f"  ours, {name} log        {rate:8.0f} /s  ×{rate / base:.2f} (target ≥ {target});"
            f" first tenth {out[f'turns_{name}_first_tenth_per_s']} /s,"
            f" last tenth {out[f'turns_{name}_last_tenth_per_s']} /s"
        )
        print_pairs(out[f"turns_vs_autogen_{name}_pairs"])


def bench_langgraph_figures(
    n: int,
    peer: dict[str, list[PeerTurns]],
    ours: dict[str, list[TurnFigures]],
    out: dict[str, Any],
) -> None:
    """Ours against LangGraph, memory against ``InMemorySaver``, SQLite against ``SqliteSaver``."""
    print(f"turns against LangGraph ({n} invokes of one thread, {len(peer['memory'])} run(s)):")
    for name, saver, target in (("memory", "InMemorySaver", 100), ("sqlite", "SqliteSaver", 50)):
        if not peer[name]:
            continue
        theirs = median([t.per_second for t in peer[name]])
        first = median([t.first_tenth_per_second for t in peer[name]])
        last = median([t.last_tenth_per_second for t in peer[name]])
        mine = median([t.per_second for t in ours[name]])
        out |= {
            f"langgraph_{name}_per_s": round(theirs, 1),
            f"langgraph_{name}_first_tenth_per_s": round(first, 1),
            f"langgraph_{name}_last_tenth_per_s": round(last, 1),
            f"turns_vs_langgraph_{name}": round(mine / theirs, 1),
        }
        print(
            f"  LangGraph {saver:14s} {theirs:8.1f} /s (first tenth {first:.1f} /s, last tenth"
            f" {last:.1f} /s); ours {mine:.0f} /s: ×{mine / theirs:.0f} (target ≥ {target})"
        )


def bench_fanout(n: int, repeat: int, out: dict[str, Any]) -> None:
    peer: list[float] = []
    ours: list[FanFigures] = []
    for _ in range(repeat):
        peer.append(run_asyncio(autogen_fanout, n))
        ours.append(run_trio(our_fanout, n, False))
    durable = run_trio(our_fanout, n, True)
    base = median(peer)
    mine = median([f.seconds for f in ours])
    early = sum(f.early_idle for f in [*ours, durable])
    out |= {
        "fanout": n,
        "autogen_fanout_s": round(base, 4),
        "fanout_memory_s": round(mine, 4),
        "fanout_sqlite_s": round(durable.seconds, 4),
        "fanout_root_turns": ours[0].root_turns,
        "fanout_early_idle": early,
        "tree_fanout_vs_autogen": round(base / mine, 3),
        "tree_fanout_vs_autogen_pairs": pair_ratios(peer, [f.seconds for f in ours]),
    }
    print(f"tree fan-out ({n} children, one turn each, final reports back to the root):")
    print(f"  autogen: gather of {n} RPCs  {base * 1000:8.1f} ms")
    print(
        f"  ours, memory log           {mine * 1000:8.1f} ms  autogen/ours ×{base / mine:.2f}"
        f" (target ≥ 1.5); the root ran {ours[0].root_turns} turns"
    )
    print_pairs(out["tree_fanout_vs_autogen_pairs"])
    print(f"  ours, SQLite log (1 run)   {durable.seconds * 1000:8.1f} ms")
    if early:
        print(f"  ! wait_idle(root) returned {early}× while reports were still on their way")


def bench_stop(n: int, leaf: str, repeat: int, out: dict[str, Any]) -> None:
    stops = [run_trio(our_stop, n, leaf, False) for _ in range(repeat)]
    bares = [run_trio(bare_cancel, n) for _ in range(3)]
    mine = median([s.stop_seconds for s in stops])
    bare = median(bares)
    first = stops[0]
    out |= {
        "stop_sessions": first.sessions,
        "stop_leaves": first.leaves,
        "stop_leaf": leaf,
        "stop_s": round(mine, 4),
        "stop_gc_s": round(median([s.gc_seconds for s in stops]), 3),
        "stop_full_collections": first.full_collections,
        "stop_gc_after_s": round(median([s.gc_after_seconds for s in stops]), 3),
        "stop_build_s": round(first.build_seconds, 3),
        "stop_records": first.records_during_stop,
        "bare_cancel_s": round(bare, 4),
        "stop_10k_vs_bare": round(mine / bare, 2),
    }
    print(
        f"stop ({first.sessions} sessions, {first.leaves} leaves in a {leaf} call;"
        f" built in {first.build_seconds:.1f} s):"
    )
    print(f"  bare nursery cancel of {n} sleeping tasks  {bare * 1000:8.1f} ms")
    print(
        f"  ours, sup.stop(root), memory log          {mine * 1000:8.1f} ms  ×{mine / bare:.1f}"
        f" (target ≤ 5); {first.records_during_stop} records logged;"
        f" {out['stop_gc_s']:.2f} s of it in the garbage collector"
        f" ({first.full_collections} full collections); one full collection right after:"
        f" {out['stop_gc_after_s']:.2f} s"
    )


def bench_idle(n: int, out: dict[str, Any]) -> None:
    idle = run_trio(idle_memory, n)
    out |= {
        "idle_sessions": idle.sessions,
        "idle_session_bytes": round(idle.total_bytes),
        "idle_session_log_bytes": round(idle.log_bytes),
        "idle_session_runtime_bytes": round(idle.runtime_bytes),
        "idle_create_per_s": round(idle.sessions / idle.seconds),
    }
    print(
        f"idle memory ({idle.sessions} sessions made by create_session, memory log, tracemalloc):"
    )
    print(
        f"  {idle.total_bytes:.0f} B/session (target ≤ 1024) = log records {idle.log_bytes:.0f} B"
        f" + runtime objects {idle.runtime_bytes:.0f} B"
    )
    print("  largest allocation sites, bytes per session:")
    for line in idle.top_sites:
        print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500, help="round trips per turns case")
    parser.add_argument("--fanout", type=int, default=1000, help="children of the fan-out root")
    parser.add_argument("--stop-sessions", type=int, default=10_000, help="sessions in stop tree")
    parser.add_argument("--stop-leaf", choices=("tool", "model"), default="tool")
    parser.add_argument("--stop-repeat", type=int, default=1, help="stop runs (a run is slow)")
    parser.add_argument("--idle-sessions", type=int, default=100_000)
    parser.add_argument("--stream-deltas", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per turns/fan-out case")
    parser.add_argument(
        "--peer-repeat", type=int, default=1, help="LangGraph runs per saver (a run is slow)"
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=("turns", "fanout", "stop", "idle", "stream"),
    )
    args = parser.parse_args()
    log_counts: Counter[str] = Counter()
    quiet_logging(log_counts)
    out: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "commit": code_version(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "trio": trio.__version__,
        "peers": peer_versions(),
        "repeat": args.repeat,
    }
    print(
        f"bench_runtime at {out['commit']}: python {out['python']}, {out['cores']} cores,"
        f" median of {args.repeat} runs (stop: {args.stop_repeat})"
    )
    print("  peers: " + ", ".join(f"{name} {version}" for name, version in out["peers"].items()))
    started = time.perf_counter()
    if "turns" not in args.skip:
        bench_turns(args.turns, args.repeat, args.peer_repeat, out)
    if "fanout" not in args.skip:
        bench_fanout(args.fanout, args.repeat, out)
    if "stop" not in args.skip:
        bench_stop(args.stop_sessions, args.stop_leaf, args.stop_repeat, out)
    if "idle" not in args.skip:
        bench_idle(args.idle_sessions, out)
    if "stream" not in args.skip:
        bench_stream(args.stream_deltas, out)
    out["log_events"] = dict(log_counts)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    if log_counts:
        print(f"! log events from the runtime: {dict(log_counts)}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
