"""SessionActor: one session's mailbox, drain, interrupt flags and reports.

A session is data while idle (its folded :class:`SessionState`) and gets a task
only while it has work: a **run** takes every queued message at once into one
merged round, runs a turn, and repeats until the mailbox is empty and no kick
is pending. Only the run changes the conversation. See
``docs/design/actors.md``.

Invariants:
- every change goes through :meth:`emit`: append to the log, then apply to the
  state, serialised per session so records apply in sequence order. With a
  pipelined log, stamping and applying are one synchronous step (no lock, no
  wait): the state may run ahead of the durable log, so nothing outside the
  session reads it as the log (fronts read the log, bounded by ``last_seq``), and
  the actor waits for durability only where it is observable: before a message
  is acknowledged (:meth:`deliver`'s seq), before a tool batch reaches the world,
  and (the supervisor) at the end of a run, an abort or a creation. See
  ``docs/design/event-log.md``;
- an inbound message is logged before it is acted on, and no message is ever
  dropped: it is drained into a round, folded into history by a stop, or (only
  by archive/delete) discarded with a logged count;
- stop/archive/delete clear ``self_kick`` and ``interrupt_requested`` before they
  wait for the aborted turn, and while ``stopping`` no round starts, no kick is
  armed and no report is sent, so nothing resurrects a stopped session;
- kicks ≤ interrupts: ``continue_task`` arms a kick only in a round that began
  with ``interrupt_requested`` set.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Literal, NamedTuple

import structlog
import trio

from ..agent.model import RoundInfo
from ..agent.repair import (
    INTERRUPTED_RESULT,
    UI_INTERRUPTED,
    RepairCache,
    unanswered,
)
from ..agent.turn import CLEANUP_SECONDS, TurnSetup, run_turn
from ..core.conversation import Message, message_chars
from ..core.errors import Fenced, SessionUnavailable
from ..core.events import (
    AgentDone,
    AgentStarted,
    ErrorRaised,
    Event,
    FlagsChanged,
    MailboxDiscarded,
    MailboxFolded,
    MessageQueued,
    RoundKind,
    RoundStarted,
    SessionArchived,
    SessionStopped,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
)
from ..core.log import MAX_BACKLOG, EventLog
from ..core.logger import get_logger
from ..core.state import QueuedMessage, SessionState
from ..tools.shell import kill_process_group
from .gcpause import GC_PAUSE_SECONDS, GcPause
from .orphans import command_started
from .rounds import (
    RESUME_TEXT,
    check_opens_round,
    fitting,
    merge_round,
    round_started,
)

Mode = Literal["soft", "hard"]


class _Atomic:
    """The :attr:`SessionActor.serial` of a pipelined log: enters and exits without
    suspending (the section it guards never suspends either)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_ATOMIC = _Atomic()


class Delivered(NamedTuple):
    start_run: bool
    """The message found the session idle: the caller starts a run for it."""
    seq: int
    """The message's last record: acknowledge it once the log is durable up to here."""


class SessionActor:
    """Owned by the supervisor; its run task lives in the supervisor's nursery."""

    __slots__ = (
        "_abort_lock",
        "_aborted_together",
        "_compaction",
        "_emit_lock",
        "_log",
        "_logger",
        "_opened",
        "_process_groups",
        "_repair",
        "_turn_scope",
        "aborts_pending",
        "agent_id",
        "compact_requested",
        "owed_interim",
        "run_ended",
        "session_id",
        "state",
        "waited_on_children",
    )

    def __init__(self, state: SessionState, log: EventLog) -> None:
        # Idle sessions are many: everything not needed while idle is created on first use.
        self.state = state
        self.session_id = state.session_id
        self.agent_id = state.agent_id
        self._log = log
        self._emit_lock: trio.Lock | None = None
        self.run_ended: trio.Event | None = None
        """Set when the current run ends; None while no run exists (the session is idle)."""
        self._opened: RoundStarted | Literal["cut"] | None = None
        """The run's opening round when it was logged with the claim (``claim_run``),
        until the run's task takes it; ``"cut"`` once a cut reached that turn first."""
        self._turn_scope: trio.CancelScope | None = None
        self._compaction: tuple[trio.CancelScope, float] | None = None
        """The shield of a compaction under way, and the seconds a cut leaves it."""
        self.aborts_pending = 0
        """Stops/archives asked for and not finished; see :attr:`stopping`."""
        self._abort_lock: trio.Lock | None = None
        """Taken by :meth:`abort` (aborts of one session run one at a time)."""
        self._aborted_together: trio.Event | None = None
        """While an :func:`abort_together` holds this session's abort turn: set when it ends
        (one event for all its sessions: no lock per session)."""
        self._process_groups: set[int] | None = None
        self._repair: RepairCache | None = None
        self.owed_interim = ""
        """An answer to the parent given while a child ran, not forwarded yet (the run's
        deferred interim if it ends with a child still running)."""
        self.waited_on_children = False
        """A child of this session was running when the current turn started."""
        self.compact_requested = False
        """A manual compaction waits for the end of the current turn."""
        self._logger: structlog.typing.FilteringBoundLogger | None = None

    @property
    def logger(self) -> structlog.typing.FilteringBoundLogger:
        if self._logger is None:
            self._logger = get_logger("halo_actors.session").bind(session_id=self.session_id)
        return self._logger

    @property
    def lock(self) -> trio.Lock:
        """Serialises appends of this session (trio's Lock is fair: FIFO)."""
        if self._emit_lock is None:
            self._emit_lock = trio.Lock()
        return self._emit_lock

    @property
    def serial(self) -> AbstractAsyncContextManager[object]:
        """What a critical section of this session runs under: :attr:`lock` when appends
        wait for their commit; nothing with a pipelined log, where every section here is
        one synchronous step (its appends never suspend), so no other task can enter it
        halfway (no lock, and no scheduling point on the hot path)."""
        return _ATOMIC if self._log.pipelined else self.lock

    # --- the one write path -------------------------------------------------

    async def emit(self, *events: Event) -> None:
        log = self._log
        if log.pipelined:  # stamp + apply in one step: atomic without the lock
            apply = self.state.apply
            for record in log.append_nowait(self.session_id, *events):
                apply(record)
            if log.backlogged:  # the writer's queue is bounded here
                with trio.CancelScope(shield=True):  # applied: emit never raises Cancelled
                    await log.wait_durable(log.stamped_seq - MAX_BACKLOG // 2)
            return
        async with self.lock:
            await self._append(*events)
        self._drop_lock_if_idle()

    async def wait_durable(self, *, shield: bool = False) -> None:
        """Until everything this session has logged so far is durable. ``shield``: for a
        caller that must not raise Cancelled here (the wait is one commit at most)."""
        with trio.CancelScope(shield=shield):
            await self._log.wait_durable(self.state.last_seq)

    def _drop_lock_if_idle(self) -> None:
        """An idle session holds no lock (many sessions are idle); the next emit makes one.
        Safe while nobody holds or waits for it: no one else keeps a reference to it."""
        lock = self._emit_lock
        if (
            lock is not None
            and self.run_ended is None
            and not lock.locked()
            and not lock.statistics().tasks_waiting
        ):
            self._emit_lock = None

    def _append_nowait(self, *events: Event) -> None:
        """Pipelined log only: stamp and apply, one atomic step."""
        for record in self._log.append_nowait(self.session_id, *events):
            self.state.apply(record)

    async def _append(self, *events: Event) -> None:
        """Caller holds ``_emit_lock``. Pipelined, this never suspends, so every critical
        section under the lock is one atomic step (and :meth:`emit` needs no lock)."""
        log = self._log
        if log.pipelined:
            records = log.append_nowait(self.session_id, *events)
        else:
            records = await log.append(self.session_id, *events)
        for record in records:
            self.state.apply(record)

    def model_messages(self, *, afresh: bool = False) -> tuple[Message, ...]:
        """The repaired conversation; only what changed since the last call is re-checked,
        unless ``afresh`` (the model refused a request): then all of it, from scratch."""
        state = self.state
        edited, state.first_edit = state.first_edit, None
        if self._repair is None or afresh:
            self._repair = RepairCache()
        edited_from = len(state.messages) if edited is None else edited
        return self._repair.view(state.messages, edited_from, state.context_chars)

    def model_chars(self, messages: tuple[Message, ...]) -> int:
        """The size of ``messages`` in a model request (``message_chars`` summed): O(1) for
        the view :meth:`model_messages` returned last, counted for anything else."""
        if self._repair is not None:
            return self._repair.chars_of(messages)
        return sum(map(message_chars, messages))

    @property
    def stopping(self) -> bool:
        """True from the start of a stop/archive/delete until it (and any other pending
        one) has finished: no round starts, no kick is armed, no report is sent."""
        return self.aborts_pending > 0

    @property
    def running(self) -> bool:
        return self.run_ended is not None

    def at_rest(self) -> bool:
        """Nothing in flight and nothing owed: no run, abort, append or command, no queued
        message, no open turn or compaction (``passivation.py`` may drop such an actor)."""
        state = self.state
        return (
            self.run_ended is None
            and not self.aborts_pending
            and (self._emit_lock is None or not self._emit_lock.locked())
            and (self._abort_lock is None or not self._abort_lock.locked())
            and not self._process_groups
            and not self.compact_requested
            and not self.owed_interim
            and not state.turn_open
            and not state.is_compacting
            and not state.parked_folds
            and (not state.mailbox or state.lifecycle == "archived")
        )

    # --- inbound messages ------------------------------------------------------

    async def deliver(
        self,
        text: str,
        images: tuple[str, ...],
        source: str | None,
        mode: Mode,
        inbox_id: int | None = None,
    ) -> Delivered:
        """Log the message. The caller starts a run if told to, and acknowledges the
        message only once the log is durable up to the returned seq."""
        queued = MessageQueued(
            text=text, images=images, source_session_id=source, inbox_id=inbox_id
        )
        message = QueuedMessage(text, images, source)
        check_opens_round(message, self._log.max_event_bytes)
        async with self.serial:
            if self.state.lifecycle in ("archived", "deleted"):  # an archive finished first
                raise SessionUnavailable(f"session {self.session_id} is {self.state.lifecycle}")
            if self._log.pipelined and not self.running:
                # One step: the message and the opening round that takes it (None while a
                # stop is under way), then the run is claimed with that round.
                opening = self.next_round("opening", arriving=message)
                if opening is not None and self.claim_run(_first_round(opening)):
                    self._append_nowait(queued, *opening)
                    return Delivered(True, self.state.last_seq - len(opening))  # the message
            if self.claim_run():
                await self._append(queued)
                return Delivered(True, self.state.last_seq)
            # Nothing to interrupt: a stop, or a compaction outside the turn loop (manual,
            # or at turn end, where the turn is still open but its loop has returned).
            quiet = self.stopping or (self.state.is_compacting and self._turn_scope is None)
            # raised already (a message since the round began): one flag record is enough
            if (quiet and mode == "soft") or self.state.interrupt_requested:
                await self._append(queued)
            else:
                await self._append(queued, FlagsChanged(interrupt_requested=True))
            seq = self.state.last_seq
        if mode == "hard" and self.cuttable:
            self.logger.info("hard_interrupt")
            self.cut_turn()
        return Delivered(False, seq)

    async def interrupt_turn(self, mode: Mode) -> bool:
        """A person's interrupt, with no message: ``soft`` raises ``interrupt_requested``
        (the turn yields at its next batch boundary, as a queued message makes it);
        ``hard`` also cancels the turn now (its running command's process group is
        killed on the way out). False when no turn is open, or a stop is under way."""
        async with self.serial:
            if not self.state.turn_open or self.stopping:
                return False
            if not self.state.interrupt_requested:
                await self._append(FlagsChanged(interrupt_requested=True))
        if mode == "hard" and self.cuttable:
            self.logger.info("hard_interrupt")
            self.cut_turn()
        return True

    # --- the run ---------------------------------------------------------------

    def claim_run(self, opened: RoundStarted | None = None) -> bool:
        """Mark a run as started (the caller starts its task at once); False if one exists.
        ``opened``: the run's opening round, logged with the message it takes (by
        :meth:`deliver`, or with a new sub-session's creation): the run's task takes that
        round instead of opening one."""
        if self.running or self.stopping:
            return False
        self.run_ended = trio.Event()
        self._opened = opened  # every run starts here: nothing of an earlier one carries over
        return True

    async def close_run(self, why: str) -> None:
        """End a run that did not finish normally; closes an open turn. Caller shields.

        The run ends even if its closing records cannot be written (a failed store, the
        caller's deadline): a session must never stay "running" with no task behind it.
        """
        try:
            await self.emit(*closing_events(self.state, why, run_ended=True))
        except Fenced:
            pass  # another node owns the tree now: its recovery closes the turn
        except Exception:
            self.logger.exception("closing_records_lost")
        finally:
            self._opened = None  # a round the run's task never took was closed just now
            ended, self.run_ended = self.run_ended, None
            if ended is not None:
                ended.set()

    async def open_round(self, kind: RoundKind) -> RoundStarted | None:
        """Splice the whole mailbox into the next round, or end the run if there is no work;
        the round the run was claimed with, if it was (``claim_run``), unless a cascade or
        a hard interrupt came before the run's task did: that turn is then closed as a cut
        one is (``stopped``, or ``interrupted`` and the next round opened)."""
        opened = self._opened
        if opened is None:
            return await self._next_or_done(kind, ())
        self._opened = None
        if self.stopping:
            return await self.complete_turn("stopped")
        if opened == "cut":  # a hard interrupt: the turn ends before its first model call
            return await self.complete_turn("interrupted")
        return opened

    async def complete_turn(self, reason: str) -> RoundStarted | None:
        """Close the turn and open the next round (a batch boundary), or end the run."""
        return await self._next_or_done("drained", (reason,))

    async def _next_or_done(self, kind: RoundKind, closing: tuple[str, ...]) -> RoundStarted | None:
        """One critical section under the emit lock, the lock :meth:`deliver` decides under:
        a message that arrives is either in the next round, or queued with its interrupt
        flag intact, or it starts a new run; never stranded. ``closing`` holds the stop
        reason of the turn to close first; its ``complete`` says whether a round follows."""
        async with self.serial:
            events = self.next_round(kind)
            batch: list[Event] = [
                TurnCompleted(batch_boundary=events is not None, stop_reason=why) for why in closing
            ]
            batch += events if events is not None else [AgentDone()]
            if self._log.pipelined:  # one synchronous step: nothing to shield
                self._append_nowait(*batch)
            else:
                with trio.CancelScope(shield=True):
                    await self._append(*batch)
            if events is not None:
                return _first_round(events)
            ended, self.run_ended = self.run_ended, None
        if ended is not None:
            ended.set()
        self._drop_lock_if_idle()
        return None

    def next_round(
        self, kind: RoundKind, arriving: QueuedMessage | None = None
    ) -> list[Event] | None:
        """The events that open the next round (one splice of the whole mailbox, or of as
        much of it as one round record holds), or None. ``arriving``: a message about to
        be queued in the same append, counted as the mailbox's last."""
        state = self.state
        if self.stopping or state.lifecycle in ("archived", "deleted"):
            return None
        resumed = state.interrupt_requested and kind != "opening"
        mailbox = state.mailbox if arriving is None else [*state.mailbox, arriving]
        if mailbox:
            taken = mailbox[: fitting(mailbox, self._log.max_event_bytes)]
            round_event = round_started(taken, kind, resumed)
        elif state.self_kick and kind != "opening":
            round_event = RoundStarted(
                text=RESUME_TEXT, kind="resume", resumed_after_interrupt=resumed
            )
        else:
            return None
        if state.interrupt_requested or state.self_kick:  # else clearing them is a no-op
            return [
                round_event,
                FlagsChanged(interrupt_requested=False, self_kick=False),
                AgentStarted(),
            ]
        return [round_event, AgentStarted()]

    async def run_turn(
        self, setup: TurnSetup, round: RoundStarted, at_boundary: Callable[[], Awaitable[bool]]
    ) -> str:
        """One turn inside its own cancel scope (the hard-interrupt handle)."""
        info = RoundInfo(
            text=round.text, kind=round.kind, resumed_after_interrupt=round.resumed_after_interrupt
        )
        host = _Host(self, at_boundary)
        reason = "error"
        with trio.CancelScope() as scope:
            self._turn_scope = scope
            try:
                reason = await run_turn(host, setup, info)
            except Fenced:
                raise  # not a crash: this node lost the tree; its new owner closes the turn
            except Exception as exc:  # a bug in a turn must not take the runtime down
                self.logger.exception("turn_crashed")
                with trio.CancelScope(shield=True):
                    await self.emit(ErrorRaised(error=f"internal error: {type(exc).__name__}"))
            finally:
                self._turn_scope = None
        if scope.cancelled_caught:  # a hard interrupt, or a stop/archive cascade
            return "stopped" if self.stopping else "interrupted"
        return reason

    @property
    def cuttable(self) -> bool:
        """A turn (running, or opened for a run whose task has not started) or a
        compaction is there for a cut to reach."""
        return (
            self._turn_scope is not None or self._opened is not None or self._compaction is not None
        )

    def cut_turn(self) -> None:
        """Abort the running turn now. A compaction under way is not cut with it: it gets
        its grace to finish (its summary is work a stop must not throw away), then is
        abandoned."""
        if self._turn_scope is not None:
            self._turn_scope.cancel()
        elif self._opened is not None:  # open, but its run's task has not taken it yet
            self._opened = "cut"
        if self._compaction is not None:
            scope, grace = self._compaction
            scope.deadline = min(scope.deadline, trio.current_time() + grace)

    @contextmanager
    def compaction_shield(self, grace: float) -> Iterator[None]:
        """Shield a compaction from cuts of its turn; a cut gives it ``grace`` seconds."""
        with trio.CancelScope(shield=True) as scope:
            if self._turn_scope is not None and self._turn_scope.cancel_called:
                scope.deadline = trio.current_time() + grace  # cut before it began
            self._compaction = (scope, grace)
            try:
                yield
            finally:
                self._compaction = None

    # --- continue_task and process groups (TurnControl) -----------------------

    async def arm_kick(self) -> str:
        """``continue_task``: checked under the emit lock, so a stop that began first wins."""
        async with self.serial:
            if self.stopping or not self.state.turn_open:
                return "no_turn"
            if not self.state.resumed_after_interrupt:
                return "not_interrupted"
            await self._append(FlagsChanged(self_kick=True))
        return "ok"

    async def track_process_group(self, pgid: int) -> None:
        """Remember a command's group (a stop kills it), then log it with its leader's
        identity, so that a restart after a crash can kill it (``orphans.py``)."""
        if self._process_groups is None:
            self._process_groups = set()
        self._process_groups.add(pgid)
        await self.emit(command_started(pgid))

    def untrack_process_group(self, pgid: int) -> None:
        if self._process_groups is not None:
            self._process_groups.discard(pgid)

    # --- stop / archive ----------------------------------------------------------

    async def abort(self, how: Literal["stop", "archive"], grace: float) -> bool:
        """Fold (stop) or discard (archive) the mailbox, abort the run, wait for it.

        The caller counted this abort in ``aborts_pending`` first. Aborts of one session
        run one at a time; one that finds the session archived by an earlier one does
        nothing. Returns whether there was anything to stop (a run or queued messages).
        """
        had_work = False
        try:
            with trio.CancelScope(shield=True):
                while self._aborted_together is not None:  # a cascade has its abort turn
                    await self._aborted_together.wait()
                if self._abort_lock is None:
                    self._abort_lock = trio.Lock()
                async with self._abort_lock:  # taken with no checkpoint if free
                    had_work = await self._abort_once(how, grace)
        finally:
            self.aborts_pending -= 1
        return had_work

    async def _abort_once(self, how: Literal["stop", "archive"], grace: float) -> bool:
        if self.state.lifecycle in ("archived", "deleted"):
            return False
        async with self.serial:  # decided under the lock a round is opened under
            had_work = self.running or bool(self.state.mailbox)
            if opening := self._abort_opening(how):
                await self._append(*opening)
        self.cut_turn()
        if self.run_ended is not None:
            await self.run_ended.wait()
        await self.kill_process_groups(grace)
        async with self.serial:
            await self._append(*self._abort_closing(how))
        return had_work

    def _abort_opening(self, how: Literal["stop", "archive"]) -> list[Event]:
        """Fold (stop) or discard (archive) the mailbox; clear the interrupt and the kick
        (only if one is set: a no-op ``FlagsChanged`` changes nothing a reader sees). May be
        empty: a session with nothing queued and no flag set has nothing to open with."""
        state = self.state
        first: list[Event] = []
        if how == "stop":
            first += self._folds()
        elif state.mailbox:
            first.append(MailboxDiscarded(count=len(state.mailbox)))
        if state.interrupt_requested or state.self_kick:
            first.append(FlagsChanged(interrupt_requested=False, self_kick=False))
        return first

    def _abort_closing(self, how: Literal["stop", "archive"]) -> list[Event]:
        if how == "stop":
            return [SessionStopped()]
        late = len(self.state.mailbox)  # arrived during the archive: discarded too, logged
        return [*([MailboxDiscarded(count=late)] if late else []), SessionArchived()]

    def claim_abort_nowait(self, ended: trio.Event) -> bool:
        """For :func:`abort_together`: take this session's abort turn now (``ended`` is set
        when that abort ends), or False if an abort of it is in progress or waiting (the
        caller then aborts it with :meth:`abort`). No lock: a stop of 10,000 sessions
        spent a twentieth of its time making and taking one per session."""
        lock = self._abort_lock
        if self._aborted_together is not None or (lock is not None and lock.locked()):
            return False
        self._aborted_together = ended
        return True

    def _folds(self) -> list[Event]:
        """The mailbox as one fold, or as several when one record could not hold it all."""
        folds: list[Event] = []
        rest = self.state.mailbox
        while rest:
            count = fitting(rest, self._log.max_event_bytes)
            folds.append(MailboxFolded(text=merge_round(rest[:count]), count=count))
            rest = rest[count:]
        return folds

    async def kill_process_groups(self, grace: float) -> None:
        groups, self._process_groups = self._process_groups or set(), None
        if not groups:
            return
        async with trio.open_nursery() as nursery:
            for pgid in groups:
                nursery.start_soon(kill_process_group, pgid, grace)


async def abort_together(
    actors: list[SessionActor],
    how: Literal["stop", "archive"],
    grace: Callable[[str], float],
    gc_pause: GcPause,
    ended: trio.Event,
) -> list[bool]:
    """Abort many sessions (a cascade) in the caller's task, step by step for all of them:
    what :meth:`SessionActor.abort` does, without a task, a lock or a wait per session.

    Pipelined log only (every append is one synchronous step, so each step of each
    session is atomic), and only for sessions whose abort turn the caller claimed
    (``claim_abort_nowait(ended)``; ``ended`` is set here once they are all done); each
    was counted in ``aborts_pending`` first. Their records are stamped back to back, so
    they go to the log in one or a few commits. Runs are cut all at once and waited for
    one after the other (the wait is the longest run's end, not the sum); the cyclic GC
    is paused while they unwind (``gcpause.py``), at most ``GC_PAUSE_SECONDS``. Returns,
    per session, whether there was anything to stop.
    """
    had_work = [False] * len(actors)
    try:
        with trio.CancelScope(shield=True):
            live = [
                i for i, a in enumerate(actors) if a.state.lifecycle not in ("archived", "deleted")
            ]
            with gc_pause.paused():
                for i in live:
                    actor = actors[i]
                    had_work[i] = actor.running or bool(actor.state.mailbox)
                    if opening := actor._abort_opening(how):
                        actor._append_nowait(*opening)
                    actor.cut_turn()
                with trio.move_on_after(GC_PAUSE_SECONDS):
                    await _wait_runs_ended(actors, live)
            await _wait_runs_ended(actors, live)
            groups = [i for i in live if actors[i]._process_groups]
            if groups:
                async with trio.open_nursery() as nursery:
                    for i in groups:
                        nursery.start_soon(actors[i].kill_process_groups, grace(actors[i].agent_id))
            for i in live:
                actors[i]._append_nowait(*actors[i]._abort_closing(how))
    finally:
        for actor in actors:
            actor.aborts_pending -= 1
            actor._aborted_together = None
        ended.set()
    return had_work


async def _wait_runs_ended(actors: list[SessionActor], indexes: list[int]) -> None:
    for i in indexes:
        if (ended := actors[i].run_ended) is not None:
            await ended.wait()


def _first_round(events: list[Event]) -> RoundStarted:
    """The round record that :meth:`SessionActor.next_round`'s events begin with."""
    first = events[0]
    assert isinstance(first, RoundStarted)
    return first


class _Host:
    """Adapts the actor to the turn loop's ``TurnHost`` protocol."""

    def __init__(self, actor: SessionActor, at_boundary: Callable[[], Awaitable[bool]]) -> None:
        self.session_id = actor.session_id
        self.agent_id = actor.agent_id
        self._actor = actor
        self._at_boundary = at_boundary

    async def emit(self, *events: Event) -> None:
        await self._actor.emit(*events)
        for event in events:
            if type(event) is ToolCalled:
                # A tool acts on the world: its call is durable first. Shielded: emit is
                # atomic under cancellation (a cut lands in the batch, which answers every call).
                await self._actor.wait_durable(shield=True)
                return

    async def land(self, *events: Event) -> None:
        if self._actor._log.pipelined:  # emit never suspends unshielded: nothing to shield
            await self.emit(*events)
            return
        with trio.CancelScope(shield=True, deadline=trio.current_time() + CLEANUP_SECONDS):
            await self.emit(*events)

    def model_messages(self, *, afresh: bool = False) -> tuple[Message, ...]:
        return self._actor.model_messages(afresh=afresh)

    def model_chars(self, messages: tuple[Message, ...]) -> int:
        return self._actor.model_chars(messages)

    async def at_batch_boundary(self) -> bool:
        return await self._at_boundary()


def closing_events(state: SessionState, why: str, *, run_ended: bool = False) -> list[Event]:
    """What closes a turn cut by a crash: results for its open calls, an error, ``complete``.

    ``run_ended``: a run ended early, with or without a turn open (a failed manual
    compaction has none); its error and ``agent_done`` are logged either way, so a
    stream following the run sees it end.
    """
    # Any open call may have run before the crash: the model is told each was cut, and
    # a person sees the same (the marker follows the model's result, never a position).
    events: list[Event] = [
        ToolReturned(
            tool_name=use.name,
            tool_use_id=use.id,
            result=INTERRUPTED_RESULT,
            is_error=True,
            ui_result=UI_INTERRUPTED,
        )
        for use in unanswered(state.messages)
    ]
    if state.is_compacting:
        events.append(FlagsChanged(is_compacting=False))
    if state.turn_open:
        events += [
            ErrorRaised(error=f"{why} while this turn ran; it was cut short"),
            TurnCompleted(stop_reason="restarted"),
            AgentDone(),
        ]
    elif run_ended:
        events += [ErrorRaised(error=f"{why} before it finished"), AgentDone()]
    return events
