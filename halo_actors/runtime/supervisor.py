"""The supervisor: owns every session's task and the tree operations.

It starts root and child sessions, delivers messages (soft and hard
interrupts), stops, archives and deletes subtrees, and supervises each
session's run: starts its task, closes it after a crash, and sends the reports up
the tree; the loop inside a run (round, turn, compaction) is ``driver.py``, and the
stop/archive/delete cascades are ``cascade.py``. Gates (same tree,
not self-or-ancestor) are *not* here: they sit in the session tools, because the
HTTP front and the report-to-parent path call these methods already authorised.
See ``docs/design/actors.md``.

Invariants:
- every task lives in the supervisor's nursery; nothing is fire-and-forget;
- a session with no run holds no task (it is only its folded state); a run's task is
  a worker (``workers.py``), a few of which stay parked between runs, holding none;
- stop/archive/delete mark the whole subtree ``stopping`` before aborting any of
  it, so no run that ends during a cascade reports to (and wakes) an ancestor;
- after a restart, a turn that was open is closed with an explicit error and a
  terminal ``complete``, and a session with queued messages gets a run;
- durability is waited for where it is observable: ``send`` acknowledges a message,
  ``create_session`` returns, a cascade (stop/archive/delete) and ``wait_idle`` (the
  end of a run) return only once the log is durable that far;
- fail-stop: when the log fails, the supervisor cancels everything it owns and
  ``open_supervisor`` raises the log's ``StoreFailed``; a reopen recovers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import Literal

import trio

from ..agent.model import (
    Model,
)
from ..core import ids
from ..core.access import Access, weakest
from ..core.errors import (
    Fenced,
    InvalidInput,
    ProfileError,
    SessionNotFound,
    SessionUnavailable,
    StoreFailed,
)
from ..core.events import (
    AgentStarted,
    CommandStarted,
    Event,
    MessageQueued,
    Notified,
    Record,
    ReportSent,
    SessionCreated,
)
from ..core.log import EventFilter, EventLog
from ..core.log.index import DELETED
from ..core.logger import get_logger
from ..core.state import QueuedMessage, SessionState, replay
from ..tools.base import Delivery, Tool
from ..tools.files import Workspace
from ..tools.registry import BUILTINS, ToolRegistry
from ..tools.sandbox import Sandbox
from .cascade import Cascades
from .driver import RunDriver
from .orphans import kill_orphans
from .ownership import LOCAL, OwnedElsewhere, Ownership
from .passivation import DEFAULT_RESIDENT_IDLE, Registry
from .profiles import DEFAULT_PROFILE, AgentProfile, Profiles
from .rounds import (
    check_opens_round,
    final_report,
    interim_report,
    report_recipient,
    round_started,
)
from .session import Delivered, Mode, SessionActor, closing_events
from .workers import RunWorkers

log = get_logger("halo_actors.supervisor")


class Supervisor:
    def __init__(
        self,
        event_log: EventLog,
        model: Model,
        profiles: Profiles,
        workspace: Workspace,
        nursery: trio.Nursery,
        tools: ToolRegistry = BUILTINS,
        *,
        access: Access = "full",
        sandbox: Sandbox | None = None,
        resident_idle: int | None = DEFAULT_RESIDENT_IDLE,
    ) -> None:
        self.log = event_log
        self.default_access: Access = access
        """The level of a session created without one, and of one logged before levels
        were recorded (``docs/security.md``)."""
        self.model = model
        self.profiles = profiles
        self.workspace = workspace
        self._nursery = nursery
        self.registry = Registry(event_log, self._busy, resident_idle, nursery)
        """Every session, resident or passivated (``passivation.py``)."""
        self._actors: dict[str, SessionActor] = self.registry.resident
        """The resident sessions (the registry's own dict)."""
        self._children: dict[str, dict[str, None]] = self.registry.children
        self._changed: trio.Event | None = None
        """Set and dropped whenever a run starts or ends; waiters re-check their condition.
        Made by the first waiter (:meth:`_next_change`): none is made while nobody waits."""
        self._run_tasks: dict[str, int] = {}
        """Live run tasks per session: a run's task outlives the run by its report up the tree."""
        self._workers = RunWorkers(nursery, self._run_task)
        """The tasks runs execute in (``workers.py``): :meth:`_run_task`, in a parked one."""
        self._runs_below: dict[str, int] = {}
        """Runs in progress strictly below each session (absent: none), for reports."""
        self._deleted: set[str] = set()
        """Ids deleted and not created again (a front's pointer to one is stale)."""
        self.tools = tools
        """Every tool a profile may name: the built-ins and the embedder's own."""
        self.failure: StoreFailed | None = None
        """Why the runtime stopped: its log failed (fail-stop)."""
        self.owner: Ownership = LOCAL
        """Which trees this runtime may write: all of them (one process), or, with a shared
        log, only those whose lease this node holds (``ownership.py``). Set before any run
        starts: a run started under ``LOCAL`` has no scope :meth:`drop_tree` can cancel."""
        self._tree_runs: dict[str, set[trio.CancelScope]] = {}
        """The cancel scope of every run task, per tree: dropping a tree cancels them."""
        self._cascades = Cascades(self)
        """Stops, archives and deletes of subtrees (``cascade.py``)."""
        self.driver = RunDriver(
            model,
            workspace,
            self,
            self._report_turn_end,
            self.below_busy,
            tools=tools,
            tool_tasks=nursery,
            access_of=lambda actor: actor.state.access or self.default_access,
            sandbox=sandbox or Sandbox(),
        )

    # --- lookup -----------------------------------------------------------------

    def actor(self, session_id: str) -> SessionActor:
        """The session's actor; a passivated session is rebuilt here with a blocking read
        (async code uses :meth:`resident`, which reads off the trio thread)."""
        if type(session_id) is str and (actor := self._actors.get(session_id)) is not None:
            return actor  # resident, so its id was checked when it was made
        actor = self.registry.activate_sync(ids.check_session_id(session_id))
        if actor is None:
            raise SessionNotFound(f"session {session_id} not found")
        return actor

    async def resident(self, session_id: str) -> SessionActor:
        """The session's actor, a passivated session rebuilt from its records first."""
        if type(session_id) is str and (actor := self._actors.get(session_id)) is not None:
            return actor  # resident, so its id was checked when it was made
        actor = await self.registry.activate(ids.check_session_id(session_id))
        if actor is None:
            raise SessionNotFound(f"session {session_id} not found")
        return actor

    def state(self, session_id: str) -> SessionState:
        return self.actor(session_id).state

    async def load(self, session_id: str) -> SessionState:
        """:meth:`state`, rebuilding a passivated session without blocking the trio thread."""
        return (await self.resident(session_id)).state

    def exists(self, session_id: str) -> bool:
        return ids.is_safe_session_id(session_id) and self.registry.known(session_id)

    def is_live(self, session_id: str) -> bool:
        return self.registry.lifecycle(session_id) not in (None, "archived", "deleted")

    def is_passivated(self, session_id: str) -> bool:
        return session_id in self.registry.passive

    def was_deleted(self, session_id: str) -> bool:
        """The session existed and was deleted (and has not been created again)."""
        return session_id in self._deleted

    def is_running(self, session_id: str) -> bool:
        actor = self._actors.get(session_id)
        return actor is not None and actor.running

    def sessions(self) -> list[SessionState]:
        """Every session's state: rebuilds every passivated one (blocking reads), so this is
        for small runtimes (tests, demos); :meth:`roots` lists without rebuilding."""
        return [self.actor(sid).state for sid in list(self.registry.ids())]

    def roots(self) -> list[tuple[str, int, str]]:
        """Every root session as ``(id, updated_ts, lifecycle)``, none rebuilt."""
        registry = self.registry
        return [
            (sid, registry.updated_ts(sid), registry.lifecycle(sid) or "deleted")
            for sid in list(registry.ids())
            if ids.is_root(sid)
        ]

    def children(self, session_id: str) -> list[str]:
        return list(self._children.get(session_id, ()))

    def subtree(self, session_id: str) -> list[str]:
        """``session_id`` and every descendant, parents before children."""
        out, stack = [], [session_id]
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(reversed(self._children.get(current, {})))
        return out

    def team_of(self, agent_id: str) -> tuple[str, ...]:
        profile = self.profiles.get(agent_id)
        return profile.team if profile else ()

    def output(self, session_id: str) -> str:
        return self.state(session_id).last_output

    def access_of(self, session_id: str) -> Access:
        """The session's access level: recorded at creation, else the runtime's default."""
        return self.state(session_id).access or self.default_access

    def describe_tree(self, root: str) -> list[dict[str, object]]:
        return [
            {
                "sessionId": s.session_id,
                "parentId": s.parent_id,
                "agentId": s.agent_id,
                "status": "running" if self.is_running(s.session_id) else s.status,
                "queued": len(s.mailbox),
                "title": s.title,
            }
            for sid in self.subtree(root)
            if (s := self.state(sid)).lifecycle not in ("archived", "deleted")
            and s.created_ts  # listed once its creation is logged, not while it commits
        ]

    async def claim(self, session_id: str, *, create: bool = True) -> None:
        """Make sure this runtime holds ``session_id``'s tree (loaded from the log if this
        node just took it). With a shared log, a tree owned by another node raises
        ``OwnedElsewhere``; ``create=False`` takes no lease for a tree that never existed."""
        await self.owner.claim(ids.root_of(ids.check_session_id(session_id)), create=create)

    # --- creation -----------------------------------------------------------------

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        namespace: str = "cli",
        agent_id: str = "default",
        title: str | None = None,
        parent_id: str | None = None,
        description: str | None = None,
        access: Access | None = None,
    ) -> str:
        """Create a session (a root unless ``parent_id``); an existing id is returned as is.

        ``access`` is the creator's level (default: the runtime's), recorded for the
        session's life; a sub-session never gets more than its parent has.

        A child-shaped id whose parent does not exist is refused (it would be an orphan
        no tree operation reaches). A session under a parent that is being stopped, or
        is archived, is refused: a cascade fixes its members when it starts, and a child born during it would
        escape. Registering and logging the creation happen together (the append is
        shielded; a failed one unregisters), so no session exists without its record.
        """
        sid = ids.check_session_id(session_id) if session_id else ids.mint_root(namespace)
        await self.claim(sid)
        if self.registry.known(sid):
            return sid
        self._profile(agent_id)
        above = ids.parent_of(sid)
        parent = await self.registry.activate(above) if above is not None else None
        if self.registry.known(sid):  # created while the parent was rebuilt
            return sid
        if above is not None and parent is None:
            raise InvalidInput(f"cannot create {sid}: its parent {above} does not exist")
        level = access or self.default_access
        actor = await self._create(sid, agent_id, parent_id, title, description, level, parent)
        await actor.wait_durable()
        return sid

    async def _create(
        self,
        sid: str,
        agent_id: str,
        parent_id: str | None,
        title: str | None,
        description: str | None,
        level: Access,
        parent: SessionActor | None,
        *first: Event,
    ) -> SessionActor:
        """Register ``sid`` and log its creation (with ``first``, in the same append), with
        no checkpoint on a pipelined log (the caller waits for durability). ``parent``:
        the resident actor of its parent, if it has one."""
        if parent is not None and parent.stopping:
            raise SessionUnavailable(f"session {parent.session_id} is being stopped")
        if parent is not None and parent.state.lifecycle in ("archived", "deleted"):
            raise SessionUnavailable(f"session {parent.session_id} is {parent.state.lifecycle}")
        if parent is not None:
            level = weakest(level, parent.state.access or self.default_access)
        state = SessionState(
            sid,
            agent_id=agent_id,
            parent_id=parent_id,
            title=title,
            description=description,
            access=level,
        )
        actor = self._register(state)
        self._deleted.discard(sid)
        created = SessionCreated(
            agent_id=agent_id,
            parent_id=parent_id,
            title=title,
            description=description,
            access=level,
        )
        try:
            if self.log.pipelined:  # one synchronous step (emit never raises Cancelled)
                await actor.emit(created, *first)
            else:
                with trio.CancelScope(shield=True):
                    await actor.emit(created, *first)
        except BaseException:
            self._unregister(sid)
            raise
        self.registry.note_idle(sid)
        return actor

    async def start_child(
        self, parent_id: str, agent_id: str, task: str, label: str = "", *, wait: bool = True
    ) -> str:
        """Create a sub-session of ``parent_id`` with ``task`` queued (from the parent) and
        start its run. The creation and the task are one append (with a pipelined log, the
        opening round that takes the task too): no reader ever sees the child without its
        task, a cascade over the parent that begins meanwhile finds both, and one wait for
        durability covers them. ``wait=False`` (the ``start_session`` tool): no wait, as
        for a report: the caller's next record (the tool's result) is after the child's,
        and the log is durable as a prefix."""
        if not self.registry.known(ids.check_session_id(parent_id)):
            raise SessionNotFound(f"session {parent_id} not found")
        child = ids.mint_child(parent_id, label or agent_id)
        if self.owner is not LOCAL:  # a runtime alone on its log holds every tree
            await self.claim(child)
        parent = await self.resident(parent_id)
        while self.registry.known(child):  # a fresh id: never an existing session's
            child = ids.mint_child(parent_id, label or agent_id)
        self._profile(agent_id)
        level = parent.state.access or self.default_access
        message = QueuedMessage(task, (), parent_id)
        check_opens_round(message, self.log.max_event_bytes)
        first: list[Event] = [MessageQueued(text=task, source_session_id=parent_id)]
        opening = None
        if self.log.pipelined:  # one step: the child's opening round opens with its creation
            opening = round_started([message], "opening", False)
            first += (opening, AgentStarted())
        # (else appends wait: a cascade may begin meanwhile, and the run opens its round)
        actor = await self._create(
            child, agent_id, parent_id, label or None, task, level, parent, *first
        )
        seq = actor.state.last_seq
        claimed = actor.claim_run(opening)  # else a cascade took it: the task stays queued
        assert claimed or opening is None, "a child's run is claimed in the step that made it"
        if claimed:
            self._start_run(actor)
        if wait:
            await self.log.wait_durable(seq)
        return child

    def _register(self, state: SessionState) -> SessionActor:
        actor = SessionActor(state, self.log)
        self.registry.add_resident(actor)
        return actor

    def _unregister(self, session_id: str) -> None:
        self.registry.remove(session_id)

    def _profile(self, agent_id: str) -> AgentProfile:
        profile = self.profiles.get(agent_id)
        if profile is None:
            broken = self.profiles.problem(agent_id)
            if broken is not None:
                raise ProfileError(f"agent profile {agent_id!r} is broken: {broken}")
            raise InvalidInput(
                f"unknown agent profile {agent_id!r}; known: {', '.join(self.profiles.names())}"
            )
        return profile

    # --- messages and interrupts ---------------------------------------------------

    async def send(
        self,
        target: str,
        text: str,
        *,
        images: tuple[str, ...] = (),
        source: str | None = None,
        mode: Mode = "soft",
    ) -> Delivery:
        """Deliver a message: idle → it starts a run; busy → queued plus an interrupt.
        Returns (the acknowledgement) once the message is durable. With a shared log, a
        message for a tree another node owns is forwarded to it (``cluster.py``) and
        acknowledged once it is durable in that node's log."""
        delivery, _ = await self.send_logged(target, text, images=images, source=source, mode=mode)
        return delivery

    async def send_logged(
        self,
        target: str,
        text: str,
        *,
        images: tuple[str, ...] = (),
        source: str | None = None,
        mode: Mode = "soft",
    ) -> tuple[Delivery, int]:
        """:meth:`send`, with the seq of the message's record, wherever it was logged (a
        stream of the run it starts begins right before it)."""
        if self.owner is not LOCAL:  # a runtime alone on its log holds every tree
            try:
                await self.claim(target, create=False)
            except OwnedElsewhere:
                return await self.owner.forward(
                    target, text, images=images, source=source, mode=mode
                )
        try:
            return await self.accept(target, text, images=images, source=source, mode=mode)
        except Fenced:  # this node lost the tree just now (nothing stored): to its new owner
            return await self.owner.forward(target, text, images=images, source=source, mode=mode)

    async def accept(
        self,
        target: str,
        text: str,
        *,
        images: tuple[str, ...] = (),
        source: str | None = None,
        mode: Mode = "soft",
        inbox_id: int | None = None,
    ) -> tuple[Delivery, int]:
        """``send`` to a tree held here (never forwarded): the delivery and the seq of the
        message's record, once durable. ``inbox_id``: the shared inbox row it came from."""
        if self.owner is not LOCAL:
            await self.claim(target, create=False)
        delivered = await self._deliver(target, text, images, source, mode, inbox_id)
        await self.log.wait_durable(delivered.seq)
        return ("started" if delivered.start_run else "queued"), delivered.seq

    async def here(self, session_id: str) -> bool:
        """Claim ``session_id``'s tree, taking its lease if it is new or free; False when
        another node owns it (a message for it is then forwarded by ``send``)."""
        try:
            await self.claim(session_id)
        except OwnedElsewhere:
            return False
        return True

    async def _deliver(
        self,
        target: str,
        text: str,
        images: tuple[str, ...],
        source: str | None,
        mode: Mode,
        inbox_id: int | None = None,
    ) -> Delivered:
        """``send`` without the wait: for a report, which crosses to another session of the
        same log. The log is durable as a prefix, so the report can never be durable (or
        read by anyone) without the records it reports on; waiting here would only keep
        the child's run task alive, which its parent reads as "a report may still come"."""
        actor = await self.resident(target)
        if actor.state.lifecycle in ("archived", "deleted"):
            raise SessionUnavailable(f"session {target} is {actor.state.lifecycle}")
        if source is None:  # a person's message to a session that cannot run is refused
            self._profile(actor.agent_id)
        delivered = await actor.deliver(text, images, source, mode, inbox_id)
        if delivered.start_run:
            self._start_run(actor)
        return delivered

    async def interrupt(self, target: str, text: str, *, source: str | None = None) -> Delivery:
        """Hard interrupt: queue ``text`` and abort the running turn now."""
        return await self.send(target, text, source=source, mode="hard")

    async def interrupt_turn(self, target: str, mode: Mode) -> bool:
        """A person's interrupt (no message) of ``target``'s running turn; False if none
        (a passivated session has none: it is not rebuilt for this)."""
        if self.registry.known(ids.check_session_id(target)) and self.is_passivated(target):
            await trio.lowlevel.checkpoint()
            return False
        return await self.actor(target).interrupt_turn(mode)

    def _start_run(self, actor: SessionActor, compact_first: bool = False) -> None:
        """Start the task of a run the caller just claimed (``actor.claim_run()``)."""
        sid = actor.session_id
        self._run_tasks[sid] = self._run_tasks.get(sid, 0) + 1
        self._count_run(sid, +1)
        self._workers.start(actor, compact_first)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _next_change(self) -> trio.Event:
        """Set at the next :meth:`_notify`."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    async def wait_idle(self, session_id: str) -> None:
        """Until nothing happens in ``session_id``'s subtree: no run, no run still reporting
        (a final report sent after its run ended starts the parent's next run), and no
        stop/archive cascade (one asked for by a tool call outlives that call)."""
        waited = await self._until_idle(lambda: self.subtree(session_id))
        await self._until_durable(waited)  # the end of a run is observable

    async def wait_all_idle(self) -> None:
        """Until nothing happens in any session (every tree is idle at once)."""
        waited = await self._until_idle(lambda: list(self._actors))
        await self._until_durable(waited)

    async def _until_durable(self, waited: bool) -> None:
        """Until everything stamped so far is durable. A caller that has ``waited`` (been
        through a checkpoint already) needs no other one when it already is."""
        log = self.log
        if not waited or log.last_seq < log.stamped_seq:
            await log.wait_durable(log.stamped_seq)

    async def _until_idle(self, members_now: Callable[[], list[str]]) -> bool:
        """Until every member is idle at one instant; True if it had to wait. Waits on one
        busy member at a time and moves on past it (linear in the members, not members ×
        wake-ups); only a pass that finds none busy re-lists and re-checks them all, in
        one step."""
        members, start, waited = members_now(), 0, False
        while True:
            busy = next((i for i in range(start, len(members)) if self._busy(members[i])), None)
            if busy is None and not waited:  # that pass saw all of them at one instant
                return False
            if busy is None:  # the final check: all of them again, with no await between
                members = members_now()
                busy = next((i for i, sid in enumerate(members) if self._busy(sid)), None)
                if busy is None:
                    return waited
            start = busy
            while self._busy(members[start]):
                await self._next_change().wait()
                waited = True

    def _busy(self, session_id: str) -> bool:
        actor = self._actors.get(session_id)
        return actor is not None and (
            actor.running or actor.stopping or session_id in self._run_tasks
        )

    async def _run_task(self, actor: SessionActor, compact_first: bool) -> None:
        try:
            if self.owner is LOCAL:  # every tree is ours for good: nothing drops one
                await self._run(actor, compact_first)
            else:
                await self._droppable_run(actor, compact_first)
        except Fenced:
            pass  # another node owns the tree now; the owner is dropping our copy
        except StoreFailed:
            pass  # the log failed: the watcher (open_supervisor) stops the runtime
        finally:
            sid = actor.session_id
            self._run_tasks[sid] -= 1
            if not self._run_tasks[sid]:
                del self._run_tasks[sid]
            self._notify()
            self.registry.note_idle(sid)
            self.log.flush_alone(sid)  # a lone run's records: committed without another pass

    async def _droppable_run(self, actor: SessionActor, compact_first: bool) -> None:
        """:meth:`_run` in a cancel scope of its tree's, which :meth:`drop_tree` cancels."""
        root = ids.root_of(actor.session_id)
        scope = trio.CancelScope()
        scopes = self._tree_runs.setdefault(root, set())
        scopes.add(scope)
        try:
            with scope:
                await self._run(actor, compact_first)
        finally:
            scopes.discard(scope)
            if not scopes and self._tree_runs.get(root) is scopes:
                del self._tree_runs[root]

    # --- the run -----------------------------------------------------------------

    async def _run(self, actor: SessionActor, compact_first: bool) -> None:
        """Supervise one run: a crash is logged and closes the turn, never the runtime.
        A crashed run still reports up: its parent may be waiting for it."""
        finished = False
        why = "the runtime stopped this run"
        try:
            await self.driver.drive(actor, self._profile(actor.agent_id), compact_first)
            finished = True
        except Fenced:
            raise  # not a crash: this node lost the tree (its closing records would be refused)
        except ProfileError as exc:  # its profile file broke: the run's error frame says so
            why = str(exc)
        except Exception:
            log.exception("run_crashed", session_id=actor.session_id)
        finally:
            if not finished:  # crashed, or cancelled by a shutdown
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
                    await actor.close_run(why)
            self._count_run(actor.session_id, -1)
            self._notify()
        if not actor.stopping:
            await self._report_run_end(actor)

    def _count_run(self, session_id: str, delta: int) -> None:
        """Keep ``_runs_below`` (runs under each ancestor) as a run starts (+1) or ends (-1)."""
        above = ids.parent_of(session_id)
        while above is not None:
            count = self._runs_below.get(above, 0) + delta
            if count:
                self._runs_below[above] = count
            else:
                del self._runs_below[above]
            above = ids.parent_of(above)

    # --- compaction ----------------------------------------------------------------

    async def compact(self, session_id: str) -> Delivery:
        """Manual compaction: now when idle (as a run), else at the end of the current turn."""
        actor = await self.resident(session_id)
        if actor.state.lifecycle in ("archived", "deleted"):
            raise SessionUnavailable(f"session {session_id} is {actor.state.lifecycle}")
        if actor.claim_run():
            self._start_run(actor, compact_first=True)
            return "started"
        actor.compact_requested = True
        return "queued"

    # --- reports up the tree --------------------------------------------------------

    def _report_turn_end(
        self, actor: SessionActor, profile: AgentProfile, reason: str
    ) -> Awaitable[None] | None:
        """After a turn: an interim report (returned, for the driver to await) when it
        answered its parent and another turn follows; else remember the answer, owed as a
        deferred interim, if the turn began while a child of this session was running (a
        turn that dispatches its first child owes the final report instead)."""
        state = actor.state
        recipient = report_recipient(state.parent_id, state.round_sources)
        # An answer: text, no error, and the turn ended on its own or with a kick armed
        # (a soft yield at a batch boundary after continue_task still answered).
        answered = (
            state.turn_output
            and not state.turn_errored
            and (reason != "interrupted" or state.self_kick)
        )
        if recipient is None or not answered:
            return None
        if state.mailbox or state.self_kick:
            return self._report(
                actor,
                recipient,
                "interim",
                interim_report(state.turn_output, profile.limits.report_cap),
            )
        if actor.waited_on_children:
            actor.owed_interim = state.turn_output
        return None

    def below_busy(self, session_id: str) -> bool:
        """A run (or a run task still reporting) is alive somewhere below ``session_id``."""
        if session_id not in self._children:  # a leaf (most sessions)
            return False
        return any(c in self._run_tasks for c in self.subtree(session_id)[1:])

    async def _report_run_end(self, actor: SessionActor) -> None:
        state = actor.state
        parent = state.parent_id
        if parent is None or state.lifecycle != "live":
            return
        profile = self.profiles.get(actor.agent_id)
        cap = (profile or DEFAULT_PROFILE).limits.report_cap
        sid = actor.session_id
        # A descendant whose run task is still alive may be about to report to us.
        if not self.below_busy(sid):
            # A sibling counts while anything in its subtree runs: an idle sibling waiting
            # on its own sub-session has not sent its final report yet.
            siblings_busy = self._runs_below.get(parent, 0) > self._runs_below.get(sid, 0)
            report = final_report(state.last_turn_output, cap, siblings_busy, state.last_turn_error)
            await self._report(actor, parent, "final", report)
        elif actor.owed_interim:
            await self._report(actor, parent, "interim", interim_report(actor.owed_interim, cap))

    async def _report(
        self, actor: SessionActor, to: str, kind: Literal["final", "interim"], text: str
    ) -> None:
        actor.owed_interim = ""
        await actor.emit(ReportSent(to_session_id=to, kind=kind))
        try:
            await self._deliver(to, text, (), actor.session_id, "soft")
        except (SessionNotFound, SessionUnavailable):
            log.info("report_dropped", session_id=actor.session_id, to=to)

    # --- stop, archive, delete ----------------------------------------------------------

    async def stop(self, target: str) -> bool:
        """Stop preserves: fold each mailbox into history, abort, wait for the whole subtree."""
        return await self._cascades.run(partial(self._cascades.abort_subtree, target, "stop"))

    async def archive(self, target: str) -> bool:
        """Archive discards the mailboxes; the subtree is read-only afterwards."""
        return await self._cascades.run(partial(self._cascades.abort_subtree, target, "archive"))

    async def delete(self, target: str) -> bool:
        return await self._cascades.run(partial(self._cascades.delete_subtree, target))

    # --- recovery ------------------------------------------------------------------

    async def recover(self) -> int:
        """After a restart: :meth:`recover_tree` for every tree of the log at once."""
        return await self._recover(None)

    async def recover_tree(
        self,
        root: str,
        *,
        orphans: Callable[[list[CommandStarted]], Awaitable[None]] | None = None,
    ) -> int:
        """Take the tree ``root`` over as a restart does, from the log's session index
        (a node that just took its lease).

        Each of its sessions this supervisor does not know yet is registered; those with
        an open turn or compaction, or with queued messages, are rebuilt at once (the
        open turn closed, the commands a crash left killed, and the messages given a run:
        an acknowledged message is answered, restart or not); the rest stay passivated
        until they are next addressed (every one is rebuilt now when this runtime does
        not passivate). Returns how many sessions got a run. ``orphans``: given the
        command groups the previous owner's cut turns left, instead of killing them here
        (they are that node's to kill, see ``ownership.py``).
        """
        sid = ids.check_session_id(root)
        if not ids.is_root(sid):
            raise InvalidInput(f"{root} is not the root of a tree")
        return await self._recover(sid, orphans)

    async def _recover(
        self,
        root: str | None,
        orphans: Callable[[list[CommandStarted]], Awaitable[None]] | None = None,
    ) -> int:
        summaries = [
            s for s in await self.log.session_index(root) if not self.registry.known(s.session_id)
        ]
        summaries.sort(key=lambda s: (ids.depth(s.session_id), s.first_seq))
        lazy = self.registry.resident_idle is not None
        eager = [
            s.session_id
            for s in summaries
            if s.created and s.life != DELETED and (s.needs_recovery or not lazy)
        ]
        states = await self._replay(eager, root, whole=not lazy)
        rebuilt: list[SessionActor] = []
        for summary in summaries:
            sid = summary.session_id
            if summary.life == DELETED:
                self._deleted.add(sid)
            elif sid in states:
                rebuilt.append(self._register(states[sid]))
            elif summary.created:
                self.registry.add_passive(sid, summary.life, summary.ts, summary.last_seq)
        waiting: list[SessionActor] = []
        for actor in rebuilt:
            state = actor.state
            if state.turn_open or state.is_compacting:
                if orphans is None:
                    killed = await self._end_orphans(state)
                else:
                    await orphans(list(state.commands))
                    killed = []
                await actor.emit(*killed, *closing_events(state, "the runtime restarted"))
            if state.mailbox and state.lifecycle != "archived":
                waiting.append(actor)
        await self.log.wait_durable(self.log.stamped_seq)
        started = [actor for actor in waiting if actor.claim_run()]
        for actor in started:
            self._start_run(actor)
        for actor in rebuilt:
            self.registry.note_idle(actor.session_id)
        return len(started)

    async def drop_tree(self, root: str) -> None:
        """Forget tree ``root`` here without writing anything: another node owns it now.
        Its runs are cancelled (their commands' process groups killed on the way out,
        their closing records refused) and waited for; then its sessions are unloaded."""
        members = [sid for sid in self.registry.ids() if ids.root_of(sid) == root]
        for scope in self._tree_runs.get(root, ()):
            scope.cancel()
        with trio.CancelScope(shield=True):
            while any(sid in self._run_tasks for sid in members):
                await self._next_change().wait()
        for sid in sorted(members, key=ids.depth, reverse=True):
            self._unregister(sid)
            self._deleted.discard(sid)
        self._notify()

    async def _replay(
        self, session_ids: list[str], root: str | None, *, whole: bool
    ) -> dict[str, SessionState]:
        """The states of ``session_ids``: from one read of the log (or of the tree ``root``)
        when ``whole``, else from one read per session."""
        if whole:
            flt = EventFilter() if root is None else EventFilter(tree=root)
            by_session: dict[str, list[Record]] = {}
            for record in await self.log.read(flt):
                by_session.setdefault(record.session_id, []).append(record)
            return {sid: replay(sid, by_session.get(sid, [])) for sid in session_ids}
        return {
            sid: replay(sid, await self.log.read(EventFilter(session_id=sid)))
            for sid in session_ids
        }

    async def stop_on_log_failure(self, scope: trio.CancelScope) -> None:
        """Fail-stop: once the log fails, nothing more can be made durable, and the
        sessions' states may hold records the log lost. Cancel everything (``scope``)."""
        self.failure = await self.log.wait_failed()
        log.error("runtime_stopped_log_failed", error=str(self.failure))
        scope.cancel()

    async def _end_orphans(self, state: SessionState) -> list[Event]:
        """Kill the command groups the crash left running in ``state``'s open turn (those
        still alive and provably ours), before the turn is closed; a notice for each."""
        if not state.commands:
            return []
        grace = (self.profiles.get(state.agent_id) or DEFAULT_PROFILE).limits.kill_grace
        killed = await kill_orphans(state.commands, grace)
        return [
            Notified(text=f"killed command process group {pgid}, left running by the crash")
            for pgid in killed
        ]


@asynccontextmanager
async def open_supervisor(
    event_log: EventLog,
    model: Model,
    *,
    workspace: Workspace,
    profiles: Profiles | None = None,
    tools: ToolRegistry | Iterable[Tool] = BUILTINS,
    access: Access = "full",
    sandbox: Sandbox | None = None,
    recover: bool = True,
    resident_idle: int | None = DEFAULT_RESIDENT_IDLE,
) -> AsyncIterator[Supervisor]:
    """Run a supervisor; leaving the block cancels every run (turns close on restart).
    ``recover=False``: load nothing now (a node sharing its log loads a tree when it
    takes its lease, ``Supervisor.recover_tree``).
    ``tools``: custom tools beside the built-ins; every profile must name only tools
    that exist (else ``ProfileError``). If the log fails (fail-stop), the block is
    cancelled and this raises the log's ``StoreFailed`` once every task has ended.
    ``resident_idle``: how many sessions at rest stay in memory (the most recently used;
    the others are passivated and rebuilt from the log when addressed); None keeps
    every session resident (``docs/design/passivation.md``)."""
    tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    profiles = profiles or Profiles()
    profiles.check_tools(tools)
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(
            event_log,
            model,
            profiles,
            workspace,
            nursery,
            tools,
            access=access,
            sandbox=sandbox,
            resident_idle=resident_idle,
        )
        nursery.start_soon(supervisor.stop_on_log_failure, nursery.cancel_scope)
        if recover:
            await supervisor.recover()
        try:
            yield supervisor
        except StoreFailed:
            if event_log.failure is None:
                raise
        finally:
            nursery.cancel_scope.cancel()
    failure = supervisor.failure or event_log.failure
    if failure is not None:  # fail-stop: every task has ended; a reopen recovers
        raise failure
