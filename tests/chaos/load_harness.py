"""Load: many trees, many SSE clients, for minutes; nothing lost, memory flat after.

One run, against ``load_server.py`` (the HTTP front in a process of its own):

1. mint ``trees`` root sessions; per root a *driver* chats (``count to K``,
   sometimes ``spawn 2 …`` so the root grows a tree, sometimes a second message
   while the first runs, which queues), and ``subscribers`` SSE clients follow the
   root for the whole run, resuming with ``Last-Event-ID`` after every ``complete``
   (at once after one that brought news; after an idle answer, a random pause);
2. warm up, then load for ``duration`` seconds, sampling the server's RSS, listeners
   and open streams every second;
3. stop the drivers, let every run end, let the subscribers catch up and leave;
   then sample for ``settle`` seconds with no client at all;
4. check, against the log read read-only: every client's stream over the range it
   covered shows every client-visible record of its session, in order, once, and
   every follower covered its session to the last record; no
   listener and no stream is left; RSS after the settle period is within
   ``FLAT_TOLERANCE`` of RSS when the load stopped.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import trio
from http_chaos import LogIndex, ServerProcess, create_token, read_log
from load_clients import Track, sse

from halo_actors.core.events import Record, TurnCompleted

SERVER = Path(__file__).with_name("load_server.py")
FLAT_TOLERANCE = 0.05
"""RSS may grow by at most this fraction (plus ``FLAT_SLACK``) over the settle period."""
FLAT_SLACK = 4 << 20
HEAP_BLOCKS_PER_RECORD = 10
"""Live heap growth allowed per logged record over the run (session state grows with
history: about 1 block per record measured); a leak per connection or per request
shows up far above it."""
HEAP_SLACK = 20_000


@dataclass(frozen=True)
class LoadPlan:
    seed: int
    trees: int
    subscribers: int
    """SSE clients per tree (each follows its root)."""
    warmup: float
    duration: float
    settle: float
    count: tuple[int, int] = (6, 14)
    """``count to K`` with K in this range: a turn of K/4 seconds."""
    pause: tuple[float, float] = (0.3, 1.5)
    """Seconds a follower waits after an idle answer before it asks again."""
    think: tuple[float, float] = (0.2, 1.0)
    """Seconds a driver waits between its messages."""


@dataclass
class LoadRun:
    plan: LoadPlan
    tracks: list[Track] = field(default_factory=list)
    samples: list[dict[str, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)
    checks: int = 0
    chats: int = 0
    queued: int = 0
    connections: int = 0


class Load:
    def __init__(self, run: LoadRun, port: int, token: str) -> None:
        self.run = run
        self.port = port
        self.token = token
        self.rng = random.Random(run.plan.seed)
        self.stop = trio.Event()
        self.final = trio.Event()

    async def driver(self, sid: str, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            roll = self.rng.random()
            if roll < 0.7:
                message = f"count to {self.rng.randint(*self.run.plan.count)}"
            elif roll < 0.85:
                message = f"spawn 2 job-{index}-{n}"
            else:
                message = f"hello-{index}-{n}"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.chat, sid, message)
                if self.rng.random() < 0.2:
                    await trio.sleep(self.rng.uniform(0.2, 1.0))
                    nursery.start_soon(self.chat, sid, f"note-{index}-{n}")
            await trio.sleep(self.rng.uniform(*self.run.plan.think))

    async def chat(self, sid: str, message: str) -> None:
        track = Track(sid)
        self.run.tracks.append(track)
        body = json.dumps({"message": message, "sessionId": sid}).encode()
        self.run.chats += 1
        self.run.connections += 1
        answer = await sse(self.port, "POST", "/api/web/chat", self.token, track, body=body)
        if answer.end == "queued":
            self.run.queued += 1
        while answer.end in ("eof", "cut") and track.last_id is not None:
            self.run.connections += 1  # an overflowed or broken chat resumes like a browser
            answer = await sse(self.port, "GET", _subscribe(sid), self.token, track, resume=True)
        if answer.end.startswith("status"):
            self.run.problems.append(f"chat {sid}: {answer.end}")

    async def subscriber(self, sid: str) -> None:
        """Follow ``sid`` to the end: after a ``complete`` with news, resume at once (it
        may be catching up, one run per answer); after an idle answer, pause first."""
        track = Track(sid, follower=True)
        self.run.tracks.append(track)
        while True:
            self.run.connections += 1
            answer = await sse(self.port, "GET", _subscribe(sid), self.token, track, resume=True)
            if answer.end.startswith("status"):
                self.run.problems.append(f"subscribe {sid}: {answer.end}")
                return
            if answer.end == "complete" and not answer.news:
                if self.final.is_set():
                    return
                await trio.sleep(self.rng.uniform(*self.run.plan.pause))


def _subscribe(sid: str) -> str:
    return f"/api/web/subscribe?sessionId={sid}"


async def run_load(plan: LoadPlan, tmp: Path) -> LoadRun:
    run = LoadRun(plan)
    workspace, state = tmp / "ws", tmp / "state"
    workspace.mkdir(parents=True)
    token = await create_token(state, workspace)
    server = ServerProcess(
        [sys.executable, str(SERVER), str(workspace), str(state)],
        dict(os.environ),
        tmp / "server.stderr",
    )
    try:
        url = await server.start()
        port = int(url.rsplit(":", 1)[1])
        run.samples.append({"t": 0, **await _stats(server)})
        roots = await _mint(url, token, plan.trees)
        run.figures["heap blocks at start"] = (await server.ask("heap"))["blocks"]
        load = Load(run, port, token)
        await _drive(load, server, roots)
        await _settle(run, server)
        if await server.terminate() != 0:
            run.problems.append("the server did not exit cleanly")
    finally:
        await server.kill()
    verify(run, await read_log(workspace))
    return run


async def _stats(server: ServerProcess) -> dict[str, int]:
    answer = await server.ask("stats")
    return {k: int(v) for k, v in answer.items()}  # type: ignore[call-overload]


async def _mint(url: str, token: str, count: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers={"x-token": token}) as client:
        return [(await client.post("/api/web/sessions")).json()["sessionId"] for _ in range(count)]


async def _drive(load: Load, server: ServerProcess, roots: list[str]) -> None:
    run, plan = load.run, load.run.plan
    began = trio.current_time()
    async with trio.open_nursery() as everyone:
        for sid in roots:
            for _ in range(plan.subscribers):
                everyone.start_soon(load.subscriber, sid)
        async with trio.open_nursery() as drivers:
            for i, sid in enumerate(roots):
                drivers.start_soon(load.driver, sid, i)
            await trio.sleep(plan.warmup)
            run.samples.append({"t": round(trio.current_time() - began), **await _stats(server)})
            run.figures["rss after warm-up"] = run.samples[-1]["rss"]
            run.figures["heap blocks after warm-up"] = (await server.ask("heap"))["blocks"]
            run.figures["seq after warm-up"] = run.samples[-1]["last_seq"]
            end = trio.current_time() + plan.duration
            while trio.current_time() < end:
                await trio.sleep(min(1.0, end - trio.current_time()))
                run.samples.append(
                    {"t": round(trio.current_time() - began), **await _stats(server)}
                )
            run.figures["rss when the load stopped"] = run.samples[-1]["rss"]
            load.stop.set()
        while (await _stats(server))["running"]:  # noqa: ASYNC110 - polls another process
            await trio.sleep(0.2)  # (reports up the trees finish too)
        load.final.set()
        stopped = trio.current_time()
    run.figures["seconds for the followers to catch up"] = round(trio.current_time() - stopped, 1)


async def _settle(run: LoadRun, server: ServerProcess) -> None:
    first = await _stats(server)
    run.figures["heap blocks when the load stopped"] = (await server.ask("heap"))["blocks"]
    await trio.sleep(run.plan.settle)
    last = await _stats(server)
    settled = await server.ask("heap")
    run.figures["heap blocks settled"] = settled["blocks"]
    run.figures["heap objects settled"] = settled["objects"]
    run.samples += [first, last]
    run.figures["rss settle start"] = first["rss"]
    run.figures["rss settled"] = last["rss"]
    run.figures["rss peak"] = max(s["rss"] for s in run.samples)
    run.figures["listeners left"] = last["listeners"]
    run.figures["streams left"] = last["streams"]
    run.figures["peak listeners"] = max(s["listeners"] for s in run.samples)
    if last["listeners"] or last["streams"]:
        run.problems.append(
            f"left behind: {last['listeners']} listeners, {last['streams']} streams"
        )
    if last["rss"] > first["rss"] * (1 + FLAT_TOLERANCE) + FLAT_SLACK:
        run.problems.append(f"RSS grew after the load stopped: {first['rss']} → {last['rss']}")
    stopped = run.figures["heap blocks when the load stopped"]
    if settled["blocks"] > stopped + HEAP_SLACK // 10:  # type: ignore[operator]
        run.problems.append(
            f"live heap grew after the load stopped: {stopped} → {settled['blocks']}"
        )
    grown = settled["blocks"] - run.figures["heap blocks at start"]  # type: ignore[operator]
    if grown > HEAP_BLOCKS_PER_RECORD * last["last_seq"] + HEAP_SLACK:
        run.problems.append(f"live heap grew by {grown} blocks for {last['last_seq']} records")


def verify(run: LoadRun, records: list[Record]) -> None:
    """Every track against the log: in order, once, nothing missing over what it covered."""
    index = LogIndex(records)
    terminal = {s for s, r in index.by_seq.items() if _is_terminal(r)}
    for track in run.tracks:
        run.problems += [f"{track.session_id}: {m}" for m in track.moved]
        if track.start is None:
            continue
        completes = [
            c for c in track.completes if c in terminal and _owner(index, c) == track.session_id
        ]
        shown = sorted([*track.shown, *completes])
        run.checks += len(shown)
        if len(set(shown)) != len(shown) or list(track.shown) != sorted(track.shown):
            run.problems.append(f"{track.session_id}: a frame twice or out of order")
        visible = index.shown.get(track.session_id, [])
        if track.follower and visible and track.covered < visible[-1]:
            run.problems.append(
                f"{track.session_id}: a follower stopped at {track.covered}, before the "
                f"session's last record {visible[-1]}"
            )
        expected = index.shown_between(track.session_id, track.start, track.covered)
        missing = sorted(set(expected) - set(shown))
        if missing:
            run.problems.append(
                f"{track.session_id}: {len(missing)} of {len(expected)} records never shown "
                f"in ({track.start}, {track.covered}], first {missing[:5]}"
            )
    run.figures["records"] = len(records)
    run.figures["frames received"] = sum(t.frames for t in run.tracks)
    run.figures["SSE connections"] = run.connections
    run.figures["chats"] = run.chats
    run.figures["queued"] = run.queued


def _is_terminal(record: Record) -> bool:
    return isinstance(record.event, TurnCompleted) and not record.event.batch_boundary


def _owner(index: LogIndex, seq: int) -> str:
    return index.by_seq[seq].session_id
