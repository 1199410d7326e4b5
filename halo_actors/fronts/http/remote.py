"""Reads of a session whose tree another node owns: answered from the shared log.

With ``serve --store postgresql://…`` each tree is written by one node (its lease
holder), but every node's log follows every commit (``PostgresEventLog``'s tail), so
any node can answer the read routes (``/history``, ``/subscribe``, the WebSocket push)
for any session. The owner answers from its runtime (:class:`SessionReader` is the
part of the ``Supervisor`` the read paths use); a node that is not the owner folds the
session from the log instead (:class:`LogView`) and streams from its own log.

Invariants:
- a view holds every record committed (on any node) before it was loaded: it first
  catches the local log up to the database's head (``EventLog.catch_up``), so a client
  that wrote on one node and reads on another sees its write;
  a stream loads it only *after* registering its subscription, so a run that ends in
  between is in the subscription (busy) or in the replay (idle), never lost;
- "running" from the log: a round opened after the session's last ``agent_done``
  (the owner's run is between its ``RoundStarted`` and its ``AgentDone``), or a live
  session with queued messages (a run is about to take them, here or, after a
  takeover, on the next owner);
- the owner answers from its runtime only while its copy is current: a durable record
  of the session past the copy's last seq means another node took the tree while this
  one stalled (its heartbeat has not noticed yet), and the read goes to the log;
- frame ids are log seqs, the same on every node, so a ``Last-Event-ID`` from one
  node resumes on any other with no gap and no duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...core import ids
from ...core.events import AgentDone, RoundStarted
from ...core.log import EventFilter, EventLog
from ...core.state import SessionState
from ...runtime.ownership import LOCAL, OwnedElsewhere
from ...runtime.supervisor import Supervisor
from ...tools.files import Workspace


class SessionReader(Protocol):
    """What the read routes need of a runtime: the owner's ``Supervisor``, or a view."""

    @property
    def log(self) -> EventLog: ...

    @property
    def workspace(self) -> Workspace: ...

    def exists(self, session_id: str) -> bool: ...

    def state(self, session_id: str) -> SessionState: ...

    def is_running(self, session_id: str) -> bool: ...


@dataclass
class LogView:
    """One session as the shared log shows it (loaded with :meth:`load`)."""

    log: EventLog
    workspace: Workspace
    session_id: str
    _state: SessionState | None
    _running: bool

    @classmethod
    async def load(cls, sup: Supervisor, session_id: str) -> LogView:
        """Fold the session's durable records (its state, and whether a run is open)."""
        await sup.log.catch_up()  # everything acknowledged on any node, read here
        flt = EventFilter(session_id=session_id)
        records = await sup.log.read(flt, until_seq=sup.log.last_seq)
        state: SessionState | None = None
        round_open = False
        for record in records:
            if state is None:
                state = SessionState(session_id)
            state.apply(record)
            if isinstance(record.event, RoundStarted):
                round_open = True
            elif isinstance(record.event, AgentDone):
                round_open = False
        running = state is not None and (
            round_open or (bool(state.mailbox) and state.lifecycle == "live")
        )
        return cls(sup.log, sup.workspace, session_id, state, running)

    def exists(self, session_id: str) -> bool:
        return (
            session_id == self.session_id
            and self._state is not None
            and self._state.created_ts > 0
            and self._state.lifecycle != "deleted"
        )

    def state(self, session_id: str) -> SessionState:
        if session_id != self.session_id or self._state is None:
            raise KeyError(session_id)
        return self._state

    def is_running(self, session_id: str) -> bool:
        return session_id == self.session_id and self._running


async def owned_here(sup: Supervisor, session_id: str) -> bool:
    """Claim the session's tree for reading: True when this node holds it (or took it
    now, loaded) and its copy is current, False when another node owns it (read it from
    the log, ``LogView``).

    A node that stalled past its lease still believes it holds the tree until its
    heartbeat notices the loss; a read served from its copy then would miss what the new
    owner wrote (an idle answer to a follower of a run in progress). So, with a shared
    log, the copy is checked against it: the owner applies its own records before they
    are durable, so a durable record of the session past the copy's last seq was written
    by another node, and the read goes to the log instead.
    """
    try:
        await sup.claim(session_id, create=False)
    except OwnedElsewhere:
        return False
    return sup.owner is LOCAL or not await _written_elsewhere(sup, session_id)


async def _written_elsewhere(sup: Supervisor, session_id: str) -> bool:
    if not sup.exists(session_id):
        return False
    last = sup.state(session_id).last_seq
    await sup.log.catch_up()
    flt = EventFilter(session_id=session_id)
    return bool(await sup.log.read(flt, after_seq=last, limit=1))


async def reader_for(sup: Supervisor, session_id: str) -> SessionReader:
    """The owner's runtime, or a view of the log when another node owns the tree."""
    if await owned_here(sup, session_id):
        return sup
    return await LogView.load(sup, session_id)


async def describe_tree_from_log(sup: Supervisor, root: str) -> list[dict[str, object]]:
    """``Supervisor.describe_tree`` of a tree another node owns, folded from the log: the
    same rows in the same order (parents before children, siblings by creation)."""
    await sup.log.catch_up()
    records = await sup.log.read(EventFilter(tree=root), until_seq=sup.log.last_seq)
    states: dict[str, SessionState] = {}  # in first-record order, as the owner registers
    round_open: dict[str, bool] = {}
    for record in records:
        sid = record.session_id
        state = states.get(sid)
        if state is None:
            state = states[sid] = SessionState(sid)
        state.apply(record)
        if isinstance(record.event, RoundStarted):
            round_open[sid] = True
        elif isinstance(record.event, AgentDone):
            round_open[sid] = False
    children: dict[str | None, list[str]] = {}
    for sid in states:
        children.setdefault(ids.parent_of(sid), []).append(sid)
    rows: list[dict[str, object]] = []
    stack = [root] if root in states else []
    while stack:
        s = states[stack.pop()]
        stack.extend(reversed(children.get(s.session_id, [])))
        if s.lifecycle in ("archived", "deleted") or not s.created_ts:
            continue
        running = round_open.get(s.session_id, False) or (bool(s.mailbox) and s.lifecycle == "live")
        rows.append(
            {
                "sessionId": s.session_id,
                "parentId": s.parent_id,
                "agentId": s.agent_id,
                "status": "running" if running else s.status,
                "queued": len(s.mailbox),
                "title": s.title,
            }
        )
    return rows
