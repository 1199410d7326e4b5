"""Suite: three ``serve --store`` nodes on loopback, seeded kill -9 and SIGSTOP under load.

Clients send chats to trees on random nodes (a tree owned elsewhere gets its message
forwarded); meanwhile one node at a time is killed (and restarted under its id) or
stalled past its lease (and resumed). Then every node runs again and the run waits
until the trees settle. Checked against the log, read straight from the database:

- every acknowledged message (its chat answered ``200``) is logged in its session
  and answered: a round holding it, then the end of that run (0 acknowledged lost);
- no tree ever had two writers: the epochs of each tree's records, in seq order,
  never decrease (once a node took the tree over, the old owner wrote nothing more);
- every session ends idle: no open turn, no compaction, an empty mailbox;
- every follower's stream resumes on another node with no gap and no duplicate: a
  follower subscribes on a random node, is cut at a random moment (or by a fault) and
  resumes with ``Last-Event-ID`` on another random node; its frames' ids only ever
  grow, and the first frame after each resume equals the first frame a replay from
  that id gives at the end (unless it was the ``complete`` an idle session answers,
  at an id below that replayed frame: nothing lay between).

Messages are ``run sleep 0.4; echo <id>``: each turn runs a command, so a fault often
lands mid-turn with a process group alive. Rerun one seed with ``HALO_CHAOS_SEED``.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import signal
from dataclasses import dataclass, field

import httpx
import msgspec
import trio
from pg_nodes import Cluster, Node, RawRecord
from web_client import EventId, Frame, SseStream

from halo_actors.core.events import Record
from halo_actors.core.state import SessionState

SETTLE = 90.0
"""Seconds the trees get to settle once every node runs again."""
CHAT_BUDGET = 20.0
"""Seconds one chat may take (connect, acknowledgement, stream) before a client gives up."""

_record = msgspec.json.Decoder(Record)


@dataclass(frozen=True)
class NodesPlan:
    seed: int
    trees: int
    messages: int
    clients: int
    faults: int
    followers: int
    ttl: float = 2.0


@dataclass
class Sent:
    root: str
    text: str
    node: str
    acked: bool = False


@dataclass
class Piece:
    """One subscription of a follower: the id it resumed after, the frames it got."""

    after: EventId | None
    node: str
    frames: list[Frame] = field(default_factory=list)


@dataclass
class Follower:
    root: str
    pieces: list[Piece] = field(default_factory=list)


@dataclass
class NodesRun:
    sent: list[Sent] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checks: int = 0
    figures: dict[str, int] = field(default_factory=dict)


async def run_nodes(plan: NodesPlan, cluster: Cluster) -> NodesRun:
    rng = random.Random(plan.seed)
    run = NodesRun()
    token = cluster.token()
    nodes = [cluster.node(f"n{i}") for i in range(1, 4)]
    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(trio.to_thread.run_sync, node.start)
    roots = [await _mint(rng.choice(nodes), token) for _ in range(plan.trees)]
    queue = [(roots[rng.randrange(len(roots))], f"m{i}") for i in range(plan.messages)]
    run.followers = [Follower(rng.choice(roots)) for _ in range(plan.followers)]
    async with trio.open_nursery() as following:
        for f, follower in enumerate(run.followers):
            following.start_soon(
                _follow, random.Random(plan.seed * 1000 + f), nodes, token, follower
            )
        async with trio.open_nursery() as nursery:
            for c in range(plan.clients):
                client_rng = random.Random(plan.seed * 100 + c)
                nursery.start_soon(_client, client_rng, nodes, token, queue, run)
            nursery.start_soon(_faults, rng, nodes, plan, run, queue)
        following.cancel_scope.cancel()
    await _run_every_node(nodes, run)
    with trio.move_on_after(SETTLE):
        while _unsettled(await trio.to_thread.run_sync(cluster.raw_records), run):  # noqa: ASYNC110 - the database has no event
            await trio.sleep(0.5)
    _check(await trio.to_thread.run_sync(cluster.raw_records), run)
    await _run_every_node(nodes, run)  # none may have crashed while the trees settled
    for follower in run.followers:
        await _check_resumes(rng, nodes, token, follower, run)
    run.figures.update(
        sent=len(run.sent),
        acknowledged=sum(s.acked for s in run.sent),
        kills=sum(f.startswith("kill") for f in run.faults),
        stalls=sum(f.startswith("stop") for f in run.faults),
        resumes=sum(len(f.pieces) - 1 for f in run.followers if f.pieces),
        followed_frames=sum(len(p.frames) for f in run.followers for p in f.pieces),
    )
    return run


async def _mint(node: Node, token: str) -> str:
    async with httpx.AsyncClient(base_url=node.url, headers={"x-token": token}) as client:
        answer = await client.post("/api/web/sessions", json={})
        answer.raise_for_status()
        root = answer.json()["sessionId"]
        assert isinstance(root, str)
        return root


async def _client(
    rng: random.Random, nodes: list[Node], token: str, queue: list[tuple[str, str]], run: NodesRun
) -> None:
    while queue:
        root, label = queue.pop(0)
        node = rng.choice(nodes)
        sent = Sent(root, f"run sleep 0.4; echo {label}-{node.node_id}", node.node_id)
        run.sent.append(sent)
        with trio.move_on_after(CHAT_BUDGET):
            with contextlib.suppress(httpx.HTTPError, OSError):  # a dead or stalled node:
                await _chat(node, token, sent)  # unacknowledged (it may still be logged)
        await trio.sleep(rng.uniform(0.0, 0.2))


async def _chat(node: Node, token: str, sent: Sent) -> None:
    timeout = httpx.Timeout(10.0, connect=2.0)
    async with (
        httpx.AsyncClient(base_url=node.url, headers={"x-token": token}, timeout=timeout) as client,
        client.stream(
            "POST", "/api/web/chat", json={"sessionId": sent.root, "message": sent.text}
        ) as resp,
    ):
        if resp.status_code != 200:
            return
        sent.acked = True  # the answer starts only once the message is durable
        async for _ in resp.aiter_bytes():
            pass


async def _faults(
    rng: random.Random,
    nodes: list[Node],
    plan: NodesPlan,
    run: NodesRun,
    queue: list[tuple[str, str]],
) -> None:
    for _ in range(plan.faults):
        await trio.sleep(rng.uniform(1.0, 3.0))
        if not queue:
            return
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            run.faults.append(f"kill {node.node_id}")
            node.kill()
            await trio.sleep(rng.uniform(0.5, 2.0))
            await trio.to_thread.run_sync(node.start)
        else:
            run.faults.append(f"stop {node.node_id}")
            node.signal(signal.SIGSTOP)
            await trio.sleep(plan.ttl + rng.uniform(0.5, 2.0))
            node.signal(signal.SIGCONT)


async def _follow(rng: random.Random, nodes: list[Node], token: str, follower: Follower) -> None:
    """Subscribe, get cut at a random moment (or by a fault), resume on a random node."""
    last: EventId | None = None
    while True:
        node = rng.choice(nodes)
        piece = Piece(last, node.node_id)
        headers = {"x-token": token} | ({"last-event-id": str(last)} if last else {})
        with trio.move_on_after(rng.uniform(0.3, 3.0)):
            try:
                async with (
                    httpx.AsyncClient(base_url=node.url, headers=headers, timeout=5.0) as client,
                    client.stream(
                        "GET", "/api/web/subscribe", params={"sessionId": follower.root}
                    ) as resp,
                ):
                    if resp.status_code == 200:
                        follower.pieces.append(piece)
                        stream = SseStream(resp)
                        while frames := await stream.take(1):
                            if frames[0].type == "session":
                                last = last or frames[0].id
                                continue
                            piece.frames.append(frames[0])
                            last = frames[0].id
            except (httpx.HTTPError, OSError):
                pass  # a dead or stalled node: resume elsewhere
        await trio.sleep(rng.uniform(0.1, 0.5))


async def _check_resumes(
    rng: random.Random, nodes: list[Node], token: str, follower: Follower, run: NodesRun
) -> None:
    frames = [(f, piece) for piece in follower.pieces for f in piece.frames]
    for (before, piece_a), (after, piece_b) in itertools.pairwise(frames):
        idle_again = before.id == after.id and before.type == after.type == "complete"
        if not before.id < after.id and not idle_again:  # an idle session's end marker,
            # answered again at the same horizon to a resume right after it, is no duplicate
            run.problems.append(
                f"follower of {follower.root}: frame {after.id} {after.data} (on "
                f"{piece_b.node}, resumed after {piece_b.after}) after {before.id} "
                f"{before.data} (on {piece_a.node}, resumed after {piece_a.after}): duplicate"
            )
    for piece in follower.pieces[1:]:
        if piece.after is None or not piece.frames:
            continue
        run.checks += 1
        node = rng.choice(nodes)
        first = await _first_after(node, token, follower.root, piece.after)
        got = piece.frames[0]
        if first is None or (first.type == got.type == "complete"):
            continue
        if got.type == "complete" and got.id < first.id:
            continue  # idle there: an end marker at the horizon, with nothing before it
        if (first.id, first.data) != (got.id, got.data):
            run.problems.append(
                f"follower of {follower.root} resumed after {piece.after} on {piece.node}: "
                f"got {got.id} {got.data}, a replay on {node.node_id} gives {first.id} {first.data}"
            )


async def _run_every_node(nodes: list[Node], run: NodesRun) -> None:
    """Every node runs again: a stalled one resumed, a killed one restarted; one that no
    fault killed but exited is a problem (a crash), then restarted too."""
    for node in nodes:
        if node.stopped:
            node.signal(signal.SIGCONT)
        if node.process is not None and node.process.poll() is not None:
            run.problems.append(_exited_by_itself(node, node.process.returncode))
            node.process = None
        if node.process is None:
            await trio.to_thread.run_sync(node.start)


def _exited_by_itself(node: Node, code: int) -> str:
    """A node no fault killed exited: a crash, named with the end of its log."""
    log = node.cluster.tmp / f"{node.node_id}.log"
    tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
    return f"node {node.node_id} exited by itself (code {code}); its log ends:\n" + "\n".join(tail)


async def _first_after(node: Node, token: str, root: str, after: EventId) -> Frame | None:
    headers = {"x-token": token, "last-event-id": str(after)}
    async with (
        httpx.AsyncClient(base_url=node.url, headers=headers, timeout=10.0) as client,
        client.stream("GET", "/api/web/subscribe", params={"sessionId": root}) as resp,
    ):
        stream = SseStream(resp)
        while frames := await stream.take(1):
            if frames[0].type != "session":
                return frames[0]
    return None


def _states(rows: list[RawRecord]) -> dict[str, SessionState]:
    states: dict[str, SessionState] = {}
    for row in rows:
        record = _record.decode(row.body)
        states.setdefault(record.session_id, SessionState(record.session_id)).apply(record)
    return states


def _unsettled(rows: list[RawRecord], run: NodesRun) -> bool:
    states = _states(rows)
    if any(s.turn_open or s.mailbox or s.is_compacting for s in states.values()):
        return True
    return bool(_unanswered(rows, run))


def _unanswered(rows: list[RawRecord], run: NodesRun) -> list[Sent]:
    """Acknowledged messages with no round holding them followed by that run's end."""
    answered: set[str] = set()
    opened: dict[str, list[str]] = {}
    for row in rows:
        record = _record.decode(row.body)
        kind = record.event.__struct_config__.tag
        if kind == "user":
            opened.setdefault(record.session_id, []).append(getattr(record.event, "text", ""))
        elif kind == "agent_done":
            for text in opened.pop(record.session_id, []):
                answered.add(text)
    return [s for s in run.sent if s.acked and not any(s.text in t for t in answered)]


def _check(rows: list[RawRecord], run: NodesRun) -> None:
    for sent in _unanswered(rows, run):
        run.problems.append(f"acknowledged message {_fate(rows, sent)}: {sent}")
    run.checks += sum(s.acked for s in run.sent)
    for sid, state in _states(rows).items():
        run.checks += 1
        if state.turn_open or state.mailbox or state.is_compacting:
            run.problems.append(f"session {sid} did not end idle ({len(state.mailbox)} queued)")
    run.checks += _check_writers(rows, run)


def _fate(rows: list[RawRecord], sent: Sent) -> str:
    """What the log holds of a message that was not answered (for the failure's text)."""
    kinds = []
    for row in rows:
        record = _record.decode(row.body)
        if record.session_id == sent.root and sent.text in str(getattr(record.event, "text", "")):
            kinds.append(f"{record.event.__struct_config__.tag}@{record.seq}/e{row.epoch}")
    return f"unanswered (logged: {', '.join(kinds)})" if kinds else "lost (not in the log)"


def _check_writers(rows: list[RawRecord], run: NodesRun) -> int:
    """0 trees with two writers: along seq, each tree's epochs never decrease (a node
    fenced out wrote nothing after the next owner's first record)."""
    last: dict[str, int] = {}
    for row in rows:
        if row.epoch < last.get(row.root, 0):
            run.problems.append(
                f"tree {row.root}: seq {row.seq} written under epoch {row.epoch} "
                f"after epoch {last[row.root]}"
            )
        last[row.root] = max(last.get(row.root, 0), row.epoch)
    return len(last)
