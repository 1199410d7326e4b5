"""The session registry: which sessions exist, which are resident, which are passivated.

Virtual actors (as Orleans has them): a session at rest need not be in memory. A
**resident** session has its :class:`SessionActor` (its folded state); a **passivated**
one is only an entry here (its lifecycle and last update time, one small int) and is
rebuilt from its records, by the very fold a restart uses, when it is next addressed.
The supervisor keeps at most ``resident_idle`` sessions at rest resident (the most
recently used); beyond that the oldest are passivated. See ``docs/design/passivation.md``.

Invariants:
- a session is passivated only when it is **at rest** (``SessionActor.at_rest``: no
  run, no abort, no append in flight, no queued message, no open turn or
  compaction), not busy for the supervisor (no run task still reporting), not
  pinned, and **durable**: every record it logged is at or below the log's
  ``last_seq``; so its records in the log are exactly its state, and rebuilding it
  gives the state it had (nothing reads or writes a passivated session: every
  write goes through a resident actor);
- passivation and activation are synchronous steps on the trio thread: an actor a
  caller got from :meth:`Registry.activate` stays resident until that caller's next
  checkpoint; a caller that holds actors across checkpoints (a cascade) pins them;
- one session has at most one actor: concurrent activations share one read, and an
  activation that finds the session resident (or gone) when its read returns uses
  that instead of installing a second one;
- the tree (``children``) covers resident and passivated sessions alike, so subtree
  operations list every member without rebuilding any.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import trio

from ..core import ids
from ..core.errors import StoreFailed
from ..core.events import Record
from ..core.log import EventFilter, EventLog
from ..core.log.index import ARCHIVED, DELETED, LIVE, STOPPED
from ..core.state import Lifecycle, SessionState, replay
from .session import SessionActor

_LIFE: dict[Lifecycle, int] = {
    "live": LIVE,
    "stopped": STOPPED,
    "archived": ARCHIVED,
    "deleted": DELETED,
}
DEFAULT_RESIDENT_IDLE = 1_000
"""Sessions at rest kept resident by default (a bound on the runtime's idle memory)."""


class Registry:
    """Every session the supervisor knows, resident or passivated, and the tree of them."""

    def __init__(
        self,
        log: EventLog,
        busy: Callable[[str], bool],
        resident_idle: int | None,
        nursery: trio.Nursery,
    ) -> None:
        self._log = log
        self._busy = busy
        self._nursery = nursery
        self.resident_idle = resident_idle if log.sync_reads else None
        """How many sessions at rest stay resident; None: none is ever passivated (a log
        that cannot be read synchronously, or the embedder's choice)."""
        self.resident: dict[str, SessionActor] = {}
        self.passive: dict[str, int] = {}
        """Passivated sessions (never deleted ones), each one int (:func:`_entry`): its
        last seq, its last update time and its lifecycle."""
        self.children: dict[str, dict[str, None]] = {}
        self._idle: dict[str, None] = {}
        """Resident sessions that came to rest, least recently first (the passivation order).
        Bounded: a sweep trims it to ``resident_idle`` whenever it grows past it."""
        self._pins: Counter[str] = Counter()
        self._loading: dict[str, trio.Event] = {}
        self._sweeper = False
        """A sweeper task is waiting for the log to make the sessions a sweep left durable."""
        self.passivations = 0
        self.activations = 0

    # --- membership -----------------------------------------------------------------

    def known(self, session_id: str) -> bool:
        return session_id in self.resident or session_id in self.passive

    def lifecycle(self, session_id: str) -> Lifecycle | None:
        actor = self.resident.get(session_id)
        if actor is not None:
            return actor.state.lifecycle
        code = self.passive.get(session_id)
        return None if code is None else _NAMES[code & _LIFE_MASK]

    def updated_ts(self, session_id: str) -> int:
        actor = self.resident.get(session_id)
        if actor is not None:
            return actor.state.updated_ts
        return (self.passive.get(session_id, 0) >> _TS_SHIFT) & _TS_MASK

    def ids(self) -> Iterable[str]:
        yield from self.resident
        yield from self.passive

    def add_resident(self, actor: SessionActor) -> None:
        sid = actor.session_id
        self.passive.pop(sid, None)
        self.resident[sid] = actor
        self._link(sid)

    def add_passive(self, session_id: str, life: int, updated_ts: int, last_seq: int) -> None:
        self.passive[session_id] = _entry(last_seq, updated_ts, life)
        self._link(session_id)

    def _link(self, session_id: str) -> None:
        parent = ids.parent_of(session_id)
        if parent is not None:
            self.children.setdefault(parent, {})[session_id] = None

    def remove(self, session_id: str) -> None:
        self.resident.pop(session_id, None)
        self.passive.pop(session_id, None)
        self._idle.pop(session_id, None)
        parent = ids.parent_of(session_id)
        if parent in self.children:
            self.children[parent].pop(session_id, None)
            if not self.children[parent]:
                del self.children[parent]
        self.children.pop(session_id, None)

    # --- activation -----------------------------------------------------------------

    def activate_sync(self, session_id: str) -> SessionActor | None:
        """The resident actor, rebuilding a passivated session with a blocking read (for
        the synchronous accessors); None if the session is unknown."""
        actor = self.resident.get(session_id)
        if actor is not None or session_id not in self.passive:
            return actor
        return self._install(session_id, self._log.read_session_sync(session_id))

    async def activate(self, session_id: str) -> SessionActor | None:
        """The resident actor, rebuilding a passivated session from its records; None if
        the session is unknown. Returns with no checkpoint after the actor is resident."""
        while True:
            actor = self.resident.get(session_id)
            if actor is not None or session_id not in self.passive:
                return actor
            loading = self._loading.get(session_id)
            if loading is not None:
                await loading.wait()
                continue
            self._loading[session_id] = done = trio.Event()
            try:
                records = await self._log.read(EventFilter(session_id=session_id))
            finally:
                del self._loading[session_id]
                done.set()
            if self._current(session_id, records):
                return self._install(session_id, records)
            # else: rebuilt, used and passivated again during the read: read it again

    async def activate_tree_members(self, members: list[str]) -> None:
        """Make every one of ``members`` (sessions of one tree) resident: one read of the
        tree when several are passivated, else one read per session."""
        passive = [sid for sid in members if sid in self.passive]
        if len(passive) < 2:
            for sid in passive:
                await self.activate(sid)
            return
        records = await self._log.read(EventFilter(tree=ids.root_of(passive[0])))
        by_session: dict[str, list[Record]] = {}
        wanted = set(passive)
        for record in records:
            if record.session_id in wanted:
                by_session.setdefault(record.session_id, []).append(record)
        for sid in passive:
            mine = by_session.get(sid, [])
            if self._current(sid, mine):
                self._install(sid, mine)
            else:  # rebuilt meanwhile (resident now, or used and passivated again)
                await self.activate(sid)

    def _current(self, session_id: str, records: list[Record]) -> bool:
        """``records`` (read while the session was passivated) are all of it now: it is
        still passivated, and with the last seq it had when it was passivated. A read that
        raced with a rebuild, a run and a second passivation ends earlier."""
        code = self.passive.get(session_id)
        if code is None or session_id in self.resident:
            return False
        return (records[-1].seq if records else 0) == code >> _SEQ_SHIFT

    def _install(self, session_id: str, records: list[Record]) -> SessionActor:
        state: SessionState = replay(session_id, records)
        actor = SessionActor(state, self._log)
        self.add_resident(actor)
        self.activations += 1
        self._idle[session_id] = None  # at rest: the most recently used
        return actor

    # --- pins -------------------------------------------------------------------------

    def pin(self, session_ids: Iterable[str]) -> list[str]:
        """Keep these sessions resident (once activated) until :meth:`unpin`."""
        pinned = list(session_ids)
        self._pins.update(pinned)
        return pinned

    def unpin(self, session_ids: Iterable[str]) -> None:
        for sid in session_ids:
            self._pins[sid] -= 1
            if self._pins[sid] <= 0:
                del self._pins[sid]
                self.note_idle(sid)

    # --- passivation ------------------------------------------------------------------

    def note_idle(self, session_id: str) -> None:
        """``session_id`` may have come to rest: it becomes the most recently used, and
        the oldest beyond ``resident_idle`` are passivated."""
        if self.resident_idle is None or session_id not in self.resident:
            return
        self._idle.pop(session_id, None)
        self._idle[session_id] = None
        if len(self._idle) > self.resident_idle:
            self.sweep()

    def sweep(self) -> None:
        """Passivate the least recently used sessions at rest beyond ``resident_idle``.
        A busy one leaves the queue (it is noted again when it comes to rest); one not
        durable yet goes back to it, and the sweeper task tries again once it is."""
        assert self.resident_idle is not None
        later: list[str] = []
        while len(self._idle) > self.resident_idle:
            sid = next(iter(self._idle))
            del self._idle[sid]
            actor = self.resident.get(sid)
            if actor is None or self._pins[sid] or self._busy(sid) or not actor.at_rest():
                continue
            if actor.state.last_seq > self._log.last_seq:
                later.append(sid)
                continue
            self._passivate(actor)
        for sid in later:
            self._idle[sid] = None
        if later and not self._sweeper:
            self._sweeper = True
            self._nursery.start_soon(self._sweep_once_durable, self._log.stamped_seq)

    def _passivate(self, actor: SessionActor) -> None:
        state = actor.state
        del self.resident[actor.session_id]
        self.passive[actor.session_id] = _entry(
            state.last_seq, state.updated_ts, _LIFE[state.lifecycle]
        )
        self.passivations += 1

    async def _sweep_once_durable(self, seq: int) -> None:
        """The supervisor's task (one at a time, only while a sweep left sessions that were
        not durable): sweep again once the log is durable up to ``seq``. A failed log
        ends it (the runtime then stops)."""
        try:
            await self._log.wait_durable(seq)
        except StoreFailed:
            return
        finally:
            self._sweeper = False
        self.sweep()


_NAMES: dict[int, Lifecycle] = {code: name for name, code in _LIFE.items()}
_LIFE_MASK = 3
_TS_SHIFT = 2
_TS_MASK = (1 << 43) - 1
"""Milliseconds since 1970 fit in 43 bits until the year 2248."""
_SEQ_SHIFT = _TS_SHIFT + 43


def _entry(last_seq: int, updated_ts: int, life: int) -> int:
    """A passivated session's registry entry: ``last_seq | updated_ts | life`` in one int."""
    return (last_seq << _SEQ_SHIFT) | (min(updated_ts, _TS_MASK) << _TS_SHIFT) | life
