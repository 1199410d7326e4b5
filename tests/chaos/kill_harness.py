"""Kill -9 mid-write: a real server under load, SIGKILLed at seeded moments, restarted.

One run (one seed) does this, with ``python -m halo_actors serve`` as a child process
on one workspace:

1. mint ``sessions`` root sessions; start the load: per session a *driver* (chat
   messages one after the other: ``count to K``, ``run echo <tag>``, ``spawn 2
   <task>``, short ones), a *noter* (short messages at random moments, mostly
   queued behind the driver's turn) and ``subscribers`` SSE clients that follow the
   session forever with ``Last-Event-ID`` resumes. Every chat whose stream is cut
   resumes with ``/subscribe`` and ``Last-Event-ID`` until its terminal ``complete``.
   Even seeds serve with ``--resident-idle 0``: every session at rest is passivated.
2. ``kills`` times: after a seeded delay, SIGKILL the server (and every command it
   spawned), read the log read-only as the kill left it (a *snapshot*), restart the
   server on the same workspace. Clients see the connection break and carry on
   against the new server.
3. Stop the load and wait, sending nothing more, until every session is idle with
   an empty mailbox (a restart answers what was queued before the kill), let the
   subscribers catch up, SIGTERM the server.
4. Check the final log against what clients received and against each snapshot
   (:func:`verify`).

Timing is real, so a seed reproduces the choices (messages, kill delays), not the
exact interleaving.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import trio
from http_chaos import (
    Chain,
    ChainReport,
    Connection,
    LogIndex,
    ServerProcess,
    check_chain,
    create_token,
    read_log,
    read_stream,
    serve_argv,
)

from halo_actors.core.events import (
    ErrorRaised,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    Notified,
    Record,
    RoundStarted,
    ToolReturned,
    TurnCompleted,
    encode_record,
)
from halo_actors.core.state import QueuedMessage, SessionState
from halo_actors.runtime.rounds import merge_round

RESTARTED = "the runtime restarted"
ORPHAN_NOTE = "left running by the crash"  # recovery killed a command's group
ANSWER_WAIT = 60.0
"""Seconds after the load stops within which every queued message must be answered."""


@dataclass(frozen=True)
class KillPlan:
    seed: int
    kills: int
    sessions: int = 4
    subscribers: int = 1
    """SSE followers per session."""
    life: tuple[float, float] = (0.5, 2.5)
    """Seconds of load before a kill (uniform)."""
    early_kill: float = 0.15
    """Chance that a kill lands within 0.25 s of the start (recovery, first attaches)."""
    stillborn: float = 0.15
    """Chance that the restart after a kill is itself killed before it is ready."""

    @property
    def resident_idle(self) -> str:
        """Even seeds passivate every session at rest (the most eager setting), odd ones
        keep the default: the kills land while sessions are passivated, and while not."""
        return "0" if self.seed % 2 == 0 else "1000"


@dataclass
class Snapshot:
    """The log as one kill left it."""

    kill: int
    max_seq: int
    digest: str
    open_turns: set[str]
    queued: dict[str, int]


@dataclass
class KillRun:
    plan: KillPlan
    chains: list[Chain] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checks: int = 0
    errors_while_up: int = 0
    figures: dict[str, int] = field(default_factory=dict)


class Cluster:
    """Where the server is now; clients wait here while it is down."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.generation = 0
        self._changed = trio.Event()

    def up(self, url: str) -> None:
        self.url = url
        self.generation += 1
        self._notify()

    def down(self) -> None:
        self.url = None
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_up(self, after_generation: int = 0) -> tuple[str, int]:
        """The URL of a server newer than ``after_generation``."""
        while self.url is None or self.generation <= after_generation:
            await self._changed.wait()
        return self.url, self.generation


class Clients:
    """The load: drivers, noters, subscribers. Every chain they make is kept."""

    def __init__(self, run: KillRun, cluster: Cluster, token: str, rng: random.Random) -> None:
        self.run = run
        self.cluster = cluster
        self.headers = {"x-token": token}
        self.rng = rng
        self.stop_load = trio.Event()
        self.final = trio.Event()
        self._tags = 0
        self.http = httpx.AsyncClient(
            headers=self.headers, timeout=httpx.Timeout(30.0, connect=5.0)
        )

    def tag(self, session_index: int) -> str:
        self._tags += 1
        return f"{self.run.plan.seed}-{session_index}-{self._tags}"

    async def request(
        self, conn: Connection, method: str, path: str, floor: int, **kwargs: object
    ) -> int:
        """One streaming request into ``conn``, against a server newer than generation
        ``floor``; returns the floor for the next request (a newer server only when this
        one went away under the request)."""
        url, gen = await self.cluster.wait_up(floor)
        try:
            async with self.http.stream(method, url + path, **kwargs) as resp:  # type: ignore[arg-type]
                if resp.status_code != 200:
                    conn.end = f"status {resp.status_code}"
                    body = await resp.aread()
                    if resp.status_code >= 500 or b"Traceback" in body:
                        self.run.problems.append(f"{method} {path}: {resp.status_code} {body!r}")
                    await trio.sleep(0.05)
                    return gen - 1
                await read_stream(resp, conn)
        except httpx.TransportError:
            conn.end = "cut"
            if self.cluster.url == url and self.cluster.generation == gen:
                self.run.errors_while_up += 1
                await trio.sleep(0.05)
                return gen - 1  # the same server is still up: retry against it
            return gen
        return gen - 1

    async def follow(self, chain: Chain, floor: int) -> None:
        """Resume ``chain`` with ``/subscribe`` until a terminal ``complete``."""
        while chain.connections[-1].end not in ("complete", "queued"):
            last = chain.last_id
            if last is None:
                return  # never acknowledged: nothing to resume
            if chain.connections[-1].end.startswith("status"):
                return
            conn = Connection(sent_after=last)
            chain.connections.append(conn)
            headers = {"last-event-id": str(last)}
            params = {"sessionId": chain.session_id}
            floor = await self.request(
                conn, "GET", "/api/web/subscribe", floor, headers=headers, params=params
            )

    async def chat(self, session_id: str, message: str, kind: str) -> Chain:
        chain = Chain(session_id, kind, message)
        conn = Connection(sent_after=None)
        chain.connections.append(conn)
        self.run.chains.append(chain)
        body = {"message": message, "sessionId": session_id}
        floor = await self.request(conn, "POST", "/api/web/chat", 0, json=body)
        await self.follow(chain, floor)
        return chain

    async def driver(self, session_id: str, index: int) -> None:
        while not self.stop_load.is_set():
            roll = self.rng.random()
            tag = self.tag(index)
            if roll < 0.45:
                message = f"count to {self.rng.randint(4, 10)}"
            elif roll < 0.65:
                message = f"run echo chaos-{tag}"
            elif roll < 0.75:
                message = f"spawn 2 job-{tag}"
            else:
                message = f"hello-{tag}"
            await self.chat(session_id, message, "driver")
            await trio.sleep(self.rng.uniform(0.0, 0.3))

    async def noter(self, session_id: str, index: int) -> None:
        while True:
            await trio.sleep(self.rng.uniform(0.3, 1.2))
            if self.stop_load.is_set():
                return
            await self.chat(session_id, f"note-{self.tag(index)}", "noter")

    async def subscriber(self, session_id: str) -> None:
        """Follow the session until the end; one chain over every resume."""
        chain = Chain(session_id, "subscriber")
        self.run.chains.append(chain)
        floor = 0
        while True:
            last = chain.last_id
            conn = Connection(sent_after=last)
            chain.connections.append(conn)
            headers = {"last-event-id": str(last)} if last is not None else {}
            params = {"sessionId": session_id}
            floor = await self.request(
                conn, "GET", "/api/web/subscribe", floor, headers=headers, params=params
            )
            news = any(f[1]["type"] != "complete" for f in conn.frames)
            if conn.end == "complete" and not news:  # idle: nothing after its last id
                if self.final.is_set():
                    return
                await trio.sleep(self.rng.uniform(0.05, 0.3))


def snapshot(kill: int, records: list[Record]) -> Snapshot:
    states = fold(records)
    return Snapshot(
        kill=kill,
        max_seq=records[-1].seq if records else 0,
        digest=digest(records),
        open_turns={s for s, st in states.items() if st.turn_open},
        queued={s: len(st.mailbox) for s, st in states.items() if st.mailbox},
    )


def fold(records: list[Record]) -> dict[str, SessionState]:
    states: dict[str, SessionState] = {}
    for record in records:
        states.setdefault(record.session_id, SessionState(record.session_id)).apply(record)
    return states


def digest(records: list[Record]) -> str:
    h = hashlib.sha256()
    for record in records:
        h.update(encode_record(record))
    return h.hexdigest()


async def run_kills(plan: KillPlan, tmp: Path) -> KillRun:
    """Drive one seeded run (see the module docstring); the caller checks the result."""
    run = KillRun(plan)
    rng = random.Random(plan.seed)
    workspace, state = tmp / "ws", tmp / "state"
    workspace.mkdir(parents=True)
    token = await create_token(state, workspace)
    env = {**os.environ, "HALO_ACTORS_HOME": str(state)}
    argv = serve_argv(workspace, "--keepalive", "2", "--resident-idle", plan.resident_idle)
    cluster = Cluster()
    clients = Clients(run, cluster, token, rng)
    server = ServerProcess(argv, env, tmp / "server.stderr")
    try:
        cluster.up(await server.start())
        sessions = await mint_sessions(clients, plan.sessions)
        async with trio.open_nursery() as nursery:
            for sid in sessions:
                for _ in range(plan.subscribers):
                    nursery.start_soon(clients.subscriber, sid)
            async with trio.open_nursery() as load:
                for i, sid in enumerate(sessions):
                    load.start_soon(clients.driver, sid, i)
                    load.start_soon(clients.noter, sid, i)
                for kill in range(1, plan.kills + 1):
                    early = rng.random() < plan.early_kill
                    await trio.sleep(rng.uniform(0.0, 0.25) if early else rng.uniform(*plan.life))
                    cluster.down()
                    await server.kill()
                    run.snapshots.append(snapshot(kill, await read_log(workspace)))
                    if rng.random() < plan.stillborn:
                        await server.spawn()  # killed again while it imports or recovers
                        await trio.sleep(rng.uniform(0.05, 0.6))
                        await server.kill()
                        run.figures["kills during a restart"] = (
                            run.figures.get("kills during a restart", 0) + 1
                        )
                    cluster.up(await server.start())
                clients.stop_load.set()
            await wait_until_answered(run, workspace)
            clients.final.set()
        status = await server.terminate()
        if status != 0:
            run.problems.append(f"the server exited with {status} on SIGTERM after the run")
    finally:
        await server.kill()
        await clients.http.aclose()
    verify(run, await read_log(workspace))
    scan_stderr(run, tmp / "server.stderr")
    return run


async def mint_sessions(clients: Clients, count: int) -> list[str]:
    url, _ = await clients.cluster.wait_up()
    sessions = []
    for _ in range(count):
        resp = await clients.http.post(url + "/api/web/sessions")
        resp.raise_for_status()
        sessions.append(str(resp.json()["sessionId"]))
    return sessions


async def wait_until_answered(run: KillRun, workspace: Path) -> None:
    """Until the log is quiet: every session idle with an empty mailbox, and no new
    message sent. A message still queued after :data:`ANSWER_WAIT` seconds was never
    answered: recovery starts a run for every session with queued messages."""
    quiet_since = -1
    waiting: list[str] = []
    with trio.move_on_after(ANSWER_WAIT):
        while True:
            records = await read_log(workspace)
            states = fold(records)
            busy = [s for s, st in states.items() if st.turn_open]
            waiting = [s for s, st in states.items() if st.mailbox and not st.turn_open]
            last = records[-1].seq if records else 0
            if not busy and not waiting:
                if quiet_since == last:
                    return
                quiet_since = last
            else:
                quiet_since = -1
            await trio.sleep(0.3)
    still = ", ".join(waiting) or "(turns still open)"
    run.problems.append(f"not quiet {ANSWER_WAIT:.0f} s after the load stopped: {still}")


def verify(run: KillRun, records: list[Record]) -> None:
    """Every invariant of the suite, against the final log."""
    index = LogIndex(records)
    _verify_order(run, records)
    for shot in run.snapshots:
        _verify_snapshot(run, shot, records)
    for chain in run.chains:
        report: ChainReport = check_chain(chain, index)
        run.checks += report.checks
        run.problems += report.problems
        visible = index.shown.get(chain.session_id, [])
        if chain.kind == "subscriber" and visible and report.covered < visible[-1]:
            run.problems.append(
                f"{chain.session_id}: a follower stopped at {report.covered}, before the "
                f"session's last record {visible[-1]}"
            )
    _verify_messages(run, records)
    states = fold(records)
    still_open = sorted(s for s, st in states.items() if st.turn_open)
    if still_open:
        run.problems.append(f"turns still open at the end: {still_open}")
    run.checks += len(states)
    run.figures["records"] = len(records)
    run.figures["chains"] = len(run.chains)
    run.figures["resumed chains"] = sum(len(c.connections) > 1 for c in run.chains)
    run.figures["frames received"] = sum(c.frame_count() for c in run.chains)
    run.figures["turns cut by a kill"] = sum(len(s.open_turns) for s in run.snapshots)
    run.figures["queued at a kill"] = sum(sum(s.queued.values()) for s in run.snapshots)
    run.figures["client errors while up"] = run.errors_while_up


def _verify_order(run: KillRun, records: list[Record]) -> None:
    seqs = [r.seq for r in records]
    run.checks += 1
    if seqs != sorted(set(seqs)):
        run.problems.append("stored seqs are not strictly increasing")
    if any(a.ts > b.ts for a, b in itertools.pairwise(records)):
        run.problems.append("timestamps decrease along the log")


def _verify_snapshot(run: KillRun, shot: Snapshot, records: list[Record]) -> None:
    """The prefix the kill left is unchanged; numbering went on above it; cut turns closed."""
    prefix = [r for r in records if r.seq <= shot.max_seq]
    run.checks += 1
    if digest(prefix) != shot.digest:
        run.problems.append(f"kill {shot.kill}: records up to seq {shot.max_seq} changed")
    for sid in sorted(shot.open_turns):
        run.checks += 1
        after = [r for r in records if r.seq > shot.max_seq and r.session_id == sid]
        problem = closing_problem(after)
        if problem:
            run.problems.append(f"kill {shot.kill}: cut turn of {sid} {problem}")


def _orphan_note(event: object) -> bool:
    return isinstance(event, Notified) and ORPHAN_NOTE in event.text


def closing_problem(after: list[Record]) -> str | None:
    """A cut turn's first records after the restart: a note per orphaned command group
    the recovery killed, results, the error, ``complete``."""
    kinds = [r.event for r in after]
    i = 0
    while i < len(kinds) and _orphan_note(kinds[i]):
        i += 1
    while i < len(kinds) and isinstance(kinds[i], ToolReturned):
        i += 1
    if i >= len(kinds) or not isinstance(kinds[i], ErrorRaised):
        return f"was not closed with an error first (saw {[type(k).__name__ for k in kinds[:4]]})"
    error = kinds[i]
    assert isinstance(error, ErrorRaised)
    if RESTARTED not in error.error:
        return f"was closed with an error that does not say why: {error.error!r}"
    nxt = kinds[i + 1] if i + 1 < len(kinds) else None
    if not isinstance(nxt, TurnCompleted) or nxt.batch_boundary:
        return "has no terminal complete after its error"
    return None


def _verify_messages(run: KillRun, records: list[Record]) -> None:
    """Acknowledged messages are logged; every logged one is drained into a round whose
    text is exactly the merge of what it took off the queue; none is ever discarded."""
    logged: dict[str, Counter[str]] = {}
    queues: dict[str, list[QueuedMessage]] = {}
    for record in records:
        sid, event = record.session_id, record.event
        queue = queues.setdefault(sid, [])
        if isinstance(event, MessageQueued):
            logged.setdefault(sid, Counter())[event.text] += 1
            queue.append(QueuedMessage(event.text, event.images, event.source_session_id))
        elif isinstance(event, RoundStarted) and event.drained:
            taken, queues[sid] = queue[: event.drained], queue[event.drained :]
            run.checks += 1
            if len(taken) != event.drained or merge_round(taken) != event.text:
                run.problems.append(f"{sid}: round {record.seq} is not its drained messages")
        elif isinstance(event, MailboxFolded | MailboxDiscarded):
            run.problems.append(f"{sid}: mailbox folded or discarded at {record.seq}")
    left = {sid: len(q) for sid, q in queues.items() if q}
    if left:
        run.problems.append(f"messages never drained: {left}")
    for chain in run.chains:
        if chain.message is None or not chain.acknowledged:
            continue
        run.checks += 1
        if logged.get(chain.session_id, Counter())[chain.message] < 1:
            run.problems.append(f"{chain.session_id}: acknowledged {chain.message!r} not logged")
    acked: dict[str, Counter[str]] = {}
    for chain in run.chains:
        if chain.message is not None and chain.acknowledged:
            acked.setdefault(chain.session_id, Counter())[chain.message] += 1
    for sid, counts in acked.items():
        short = counts - logged.get(sid, Counter())
        if short:
            run.problems.append(f"{sid}: acknowledged more often than logged: {dict(short)}")


def scan_stderr(run: KillRun, path: Path) -> None:
    """Crashes the server logged (a kill cuts a line short; that is not one)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    for marker in ("request_failed", "run_crashed", "turn_crashed", "event_log_writer_stopped"):
        count = text.count(marker)
        if count:
            run.problems.append(f"server stderr: {count} x {marker}")
    run.figures["tracebacks in server stderr"] = text.count("Traceback")
