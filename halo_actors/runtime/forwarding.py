"""Messages between nodes: the sender's wait, and the owner's delivery of inbox rows.

A node asked to send a message to a tree another node owns (``Supervisor.send``
meeting ``OwnedElsewhere``) stores it as an inbox row (``core/log/inbox.py``) and waits
until the owner has settled it; only then does it acknowledge. The owner's loop
delivers the rows of the trees it holds, in row order, through ``Supervisor.accept``
(the ``MessageQueued`` record carries the row id), and settles each once its record is
durable. See ``docs/design/postgres.md`` (Forwarding).

Invariants:
- acknowledged ⇒ logged: the sender answers only after reading a settled outcome whose
  seq it has caught up to in its own copy of the log (a stream it opened first sees
  the message and its run);
- logged at most once: an owner reads, once per tree it took, the row ids already in
  the tree's log, and settles such rows from there instead of delivering them again;
- a row whose tree's lease is free is not stranded: the waiting sender takes the tree
  itself (``claim``), and so delivers the row.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Literal

import psycopg
import trio

from ..core import ids
from ..core.errors import Fenced, InvalidInput, SessionNotFound, SessionUnavailable
from ..core.events import MessageQueued
from ..core.log import EventFilter
from ..core.log.inbox import Inbox, Message, Outcome, Row
from ..core.logger import get_logger
from .ownership import OwnedElsewhere

if TYPE_CHECKING:
    from .cluster import NodeOwnership

log = get_logger("halo_actors.forwarding")

FORWARD_WAIT = 60.0
"""Seconds a sender waits for the owner to log a forwarded message before it answers
``NotDelivered`` (the row stays: the message is still delivered, just not acknowledged)."""

Delivery = Literal["started", "queued"]


class NotDelivered(SessionUnavailable):
    """A forwarded message is stored but its owner has not logged it in time: it will be
    delivered (by that node or the tree's next owner), so it must not be sent again."""


_REFUSALS: dict[str, type[Exception]] = {
    "not_found": SessionNotFound,
    "unavailable": SessionUnavailable,
    "invalid": InvalidInput,
}


class Forwarding:
    def __init__(self, owner: NodeOwnership, inbox: Inbox) -> None:
        self.owner = owner
        self.inbox = inbox
        self.logged: dict[str, dict[int, int]] = {}
        """Per tree loaded here: inbox row id -> seq of its record, for rows already in the
        tree's log (read once per take; forgotten when the tree is dropped)."""

    # --- the sender ---------------------------------------------------------------------

    async def forward(
        self,
        session_id: str,
        text: str,
        *,
        images: tuple[str, ...],
        source: str | None,
        mode: Literal["soft", "hard"],
    ) -> tuple[Delivery, int]:
        """Store the message for the owner and wait for its outcome: what it did there and
        the seq of its record (published here too by then)."""
        root = ids.root_of(session_id)
        held = await self.owner.leases.owner(root)
        message = Message(text=text, images=images, source=source, mode=mode)
        row = await self.inbox.put(root, session_id, held[0] if held else "", message)
        outcome = await self._wait(root, row)
        if outcome.error is not None:
            kind, _, why = outcome.error.partition(": ")
            raise _REFUSALS.get(kind, SessionUnavailable)(why)
        await self.owner.leases.log.catch_up()  # to the database's head: past our record
        return ("started" if outcome.started else "queued"), outcome.seq

    async def _wait(self, root: str, row: int) -> Outcome:
        deadline = trio.current_time() + FORWARD_WAIT
        while (outcome := await self.inbox.outcome(row)) is None:
            if trio.current_time() >= deadline:
                raise NotDelivered(
                    f"the message for tree {root} is stored, but its owner has not logged it "
                    "yet; it will be delivered: do not send it again"
                )
            await self.inbox.wait_settled(row)
            if root not in self.owner.loaded:
                with contextlib.suppress(OwnedElsewhere):  # no live owner: take it ourselves
                    await self.owner.claim(root, create=False)
            if root in self.owner.loaded:
                self.inbox.arrived.set()  # our own loop delivers it now
        return outcome

    # --- the owner ----------------------------------------------------------------------

    async def deliver_forever(self) -> None:
        """Deliver the rows of the trees held here, woken by notifications (or a poll)."""
        while True:
            with trio.move_on_after(1.0):
                await self.inbox.arrived.wait()
            self.inbox.arrived = trio.Event()
            try:
                await self.deliver_waiting()
            except (psycopg.Error, OSError) as exc:
                log.warning("inbox_delivery_failed", error=repr(exc))

    async def deliver_waiting(self) -> int:
        """Deliver every unsettled row of a tree held here; how many were settled."""
        settled = 0
        for row in await self.inbox.unsettled(sorted(self.owner.loaded)):
            if row.root in self.owner.loaded and await self._deliver(row):
                settled += 1
        return settled

    async def _deliver(self, row: Row) -> bool:
        logged = await self._logged(row.root)
        if row.id in logged:  # logged by an owner that died before settling it
            await self.inbox.settle(row.id, logged[row.id], False, None)
            return True
        m = row.message
        error: str | None = None
        seq, started = 0, False
        try:
            delivery, seq = await self.owner.sup.accept(
                row.session_id,
                m.text,
                images=m.images,
                source=m.source,
                mode=m.mode,
                inbox_id=row.id,
            )
            started = delivery == "started"
            logged[row.id] = seq
        except (OwnedElsewhere, Fenced):
            return False  # lost meanwhile: the tree's next owner delivers it
        except SessionNotFound as exc:
            error = f"not_found: {exc}"
        except SessionUnavailable as exc:
            error = f"unavailable: {exc}"
        except InvalidInput as exc:
            error = f"invalid: {exc}"
        await self.inbox.settle(row.id, seq, started, error)
        return True

    async def _logged(self, root: str) -> dict[int, int]:
        found = self.logged.get(root)
        if found is None:
            flt = EventFilter(tree=root, kinds=frozenset({"message_queued"}))
            found = {}
            for record in await self.owner.sup.log.read(flt):
                event = record.event
                if isinstance(event, MessageQueued) and event.inbox_id is not None:
                    found[event.inbox_id] = record.seq
            self.logged[root] = found
        return found
